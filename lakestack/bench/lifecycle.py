"""The bench loop: up, wait until the pipelines run, load, drain, measure, and always tear down.

A :class:`BenchTarget` is where the loop runs (the embedded emulator and local Spark, or a Pulumi stack in the
cloud); :func:`run_bench` drives any target through the same phases and owns the rule that matters most to a
user paying for the stack: teardown runs after a failure, Ctrl-C (SIGINT) and SIGTERM too, and is never cut
short by a second signal; the report says whether it completed and what is left if not.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from lakestack.report import RunReport

Phase = Literal["up", "ready", "load", "drain", "measure"]
PHASES: tuple[Phase, ...] = ("up", "ready", "load", "drain", "measure")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived during the run: a KeyboardInterrupt, so no ``except Exception`` swallows it
    and whatever handles Ctrl-C handles SIGTERM the same way."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Teardown:
    """What tearing down left behind.

    Attributes:
        complete: everything the run created is gone.
        left: what is still there, one entry each (empty when complete).
        remove_with: the command(s) that remove what is left.
        kept: left on purpose (``--keep``).
    """

    complete: bool
    left: tuple[str, ...] = ()
    remove_with: str = ""
    kept: bool = False

    def summary(self) -> str:
        """``complete``, or what is left and how to remove it (the ``teardown`` value of ``--json``)."""
        if self.complete:
            return "complete"
        head = "kept (--keep)" if self.kept else "incomplete"
        what = "; ".join(self.left) or "unknown"
        return f"{head}: left {what}; remove with: {self.remove_with}"


class BenchTarget(Protocol):
    """Where a bench runs. Each phase raises on failure; :meth:`destroy` and :meth:`kept` never raise."""

    stack: str
    run_dir: Path

    def up(self) -> None: ...

    def wait_ready(self) -> None: ...

    def load(self) -> int: ...

    def drain(self, acknowledged: int) -> None: ...

    def measure(self) -> RunReport: ...

    def destroy(self) -> Teardown: ...

    def kept(self) -> Teardown: ...


class SignalGuard:
    """SIGINT and SIGTERM as :class:`Interrupted` while the run is on; noted, not obeyed, during teardown.

    The first signal raises; from then on (and inside :meth:`deferring`) a signal only prints that teardown
    is under way, so the cleanup the exception sets off is never cut short. Inside :meth:`critical` (starting
    a process this run must be able to stop: the emulator, Spark's JVM; `pulumi up`) a signal is held and
    raised when the section ends, since a process interrupted half-way through its start is one nobody can
    stop. Libraries may install their own SIGINT handler (Spark does, when its context starts): :meth:`arm`
    puts ours back.
    """

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.received: list[int] = []
        self._say = say or (lambda message: print(message, file=sys.stderr, flush=True))
        self._previous: dict[int, object] = {}
        self._deferring = False
        self._doing = "tearing down"
        self._critical: str | None = None
        self._held: int | None = None

    def __enter__(self) -> SignalGuard:
        for signum in _SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
        self.arm()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def arm(self) -> None:
        """(Re)install our handlers, unless a signal already arrived."""
        if not self._deferring:
            for signum in _SIGNALS:
                signal.signal(signum, self._handle)

    @contextlib.contextmanager
    def deferring(self, doing: str) -> Iterator[None]:
        """Within the block, signals are noted and announced, never raised."""
        self._deferring, self._doing = True, doing
        for signum in _SIGNALS:
            signal.signal(signum, self._handle)
        yield

    @contextlib.contextmanager
    def critical(self, doing: str) -> Iterator[None]:
        """Within the block, a signal is held; it is raised (as :class:`Interrupted`) once the block ends."""
        if self._deferring or self._critical is not None:
            yield
            return
        self._critical = doing
        try:
            yield
        finally:
            self._critical = None
        self.arm()
        held, self._held = self._held, None
        if held is not None:
            self._deferring = True
            raise Interrupted(held)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._critical is not None and not self._deferring:
            if self._held is None:
                self._held = signum
                self._say(
                    f"{signal.Signals(signum).name} received while {self._critical}: stopping as soon as that "
                    "is done (stopped half-way, it would leave a process or resources nobody can remove)"
                )
            return
        if self._deferring:
            self._say(
                f"{signal.Signals(signum).name} received while {self._doing}: finishing it first "
                "(it removes what the run created)"
            )
            return
        self._deferring = True
        raise Interrupted(signum)


@dataclass
class Outcome:
    """How a bench run ended: the phases it finished (seconds each), and why it stopped early if it did."""

    status: Literal["completed", "interrupted", "failed"] = "completed"
    detail: str = ""
    signum: int | None = None
    phases: dict[str, float] = field(default_factory=dict)
    report: RunReport | None = None
    teardown: Teardown = field(default_factory=lambda: Teardown(complete=False, left=("not attempted",)))
    error: BaseException | None = None

    def summary(self) -> str:
        if self.status == "completed":
            return "completed"
        return f"{self.status}: {self.detail}" if self.detail else self.status

    @property
    def exit_code(self) -> int:
        """0 all well; 1 a check, a phase or the teardown failed; 128 + signal number when interrupted."""
        if self.status == "interrupted":
            return 128 + (self.signum or signal.SIGINT)
        ok = self.status == "completed" and self.report is not None and self.report.ok
        return 0 if ok and self.teardown.complete else 1


def _phase_runner(target: BenchTarget, outcome: Outcome, guard: SignalGuard) -> Callable[[Phase], None]:
    acknowledged = 0

    def run(phase: Phase) -> None:
        nonlocal acknowledged
        guard.arm()
        started = time.monotonic()
        if phase == "up":
            target.up()
        elif phase == "ready":
            target.wait_ready()
        elif phase == "load":
            acknowledged = target.load()
        elif phase == "drain":
            target.drain(acknowledged)
        else:
            outcome.report = target.measure()
        outcome.phases[phase] = round(time.monotonic() - started, 1)

    return run


def run_bench(
    target: BenchTarget,
    *,
    keep: bool = False,
    guard: SignalGuard | None = None,
    known_errors: tuple[type[BaseException], ...] = (Exception,),
) -> Outcome:
    """Drive ``target`` through every phase, then tear it down (or keep it with ``keep``), whatever happens.

    Args:
        target: where the run happens.
        keep: leave what the run created (its teardown is then reported as kept, with how to remove it).
        guard: the signal guard to use; one is installed for the call when None.
        known_errors: errors that end the run as ``failed`` with their message; anything else is a bug,
            which still gets the teardown, then propagates.

    Returns:
        The outcome, with the report when the run got as far as measuring.
    """
    outcome = Outcome()
    with contextlib.ExitStack() as stack:
        active = guard or stack.enter_context(SignalGuard())
        run = _phase_runner(target, outcome, active)
        try:
            for phase in PHASES:
                run(phase)
        except Interrupted as signalled:
            outcome.status, outcome.signum = "interrupted", signalled.signum
            outcome.detail = f"{signal.Signals(signalled.signum).name} during {_current(outcome)}"
        except KeyboardInterrupt:
            # A library's own SIGINT handler (Spark's) won the race with ours.
            outcome.status, outcome.signum = "interrupted", int(signal.SIGINT)
            outcome.detail = f"SIGINT during {_current(outcome)}"
        except known_errors as error:
            outcome.status, outcome.error = "failed", error
            outcome.detail = f"{_current(outcome)}: {error}"
        except BaseException as error:
            outcome.status, outcome.error = "failed", error
            outcome.detail = f"{_current(outcome)}: unexpected {type(error).__name__}: {error}"
            raise
        finally:
            with active.deferring(f"tearing down {target.stack}"):
                outcome.teardown = _teardown(target, keep=keep)
    return outcome


def _current(outcome: Outcome) -> str:
    """The phase that was running when the run stopped."""
    done = len(outcome.phases)
    return PHASES[done] if done < len(PHASES) else "the report"


def _teardown(target: BenchTarget, *, keep: bool) -> Teardown:
    try:
        return target.kept() if keep else target.destroy()
    except Exception as error:  # destroy must report, never raise: the run's outcome is still wanted
        return Teardown(
            complete=False,
            left=(f"unknown ({type(error).__name__} while tearing down: {error})",),
            remove_with=f"lakestack down --stack {target.stack}",
        )
