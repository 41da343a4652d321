"""The bench loop with a stand-in target: every phase in order, and teardown whatever happens."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lakestack.bench.lifecycle import Interrupted, Outcome, SignalGuard, Teardown, run_bench
from lakestack.errors import RunFailedError
from lakestack.reconcile import reconcile
from lakestack.report import RunReport


def _report(missing: bool = False) -> RunReport:
    return RunReport.build(
        reconcile(["a", "b"], ["a"] if missing else ["a", "b"]),
        latencies_s=[1.0],
        throughput_eps=None,
        send_rate_eps=None,
        table_uri="t",
        files=1,
        table_version=0,
        micro_batches=1,
        duration_s=1.0,
        started_at="now",
    )


class FakeTarget:
    """Records each call; fails, raises a signal or misbehaves in the phase it is told to."""

    stack = "fake"
    run_dir = Path("unused")

    def __init__(self, *, fail_in: str = "", signal_in: str = "", error: BaseException | None = None) -> None:
        self.calls: list[str] = []
        self.fail_in, self.signal_in = fail_in, signal_in
        self.error = error or RunFailedError("the query failed")
        self.signal_during_destroy: int | None = None
        self.destroy_error: Exception | None = None
        self.missing = False

    def _phase(self, name: str) -> None:
        self.calls.append(name)
        if name == self.signal_in:
            signal.raise_signal(signal.SIGTERM)
            self.calls.append(f"{name} went on after the signal")
        if name == self.fail_in:
            raise self.error

    def up(self) -> None:
        self._phase("up")

    def wait_ready(self) -> None:
        self._phase("ready")

    def load(self) -> int:
        self._phase("load")
        return 7

    def drain(self, acknowledged: int) -> None:
        self._phase(f"drain {acknowledged}")

    def measure(self) -> RunReport:
        self._phase("measure")
        return _report(self.missing)

    def destroy(self) -> Teardown:
        self.calls.append("destroy")
        if self.signal_during_destroy is not None:
            signal.raise_signal(self.signal_during_destroy)
        if self.destroy_error is not None:
            raise self.destroy_error
        self.calls.append("destroy finished")
        return Teardown(complete=True)

    def kept(self) -> Teardown:
        self.calls.append("kept")
        return Teardown(
            complete=False, kept=True, left=("the stack",), remove_with="lakestack down --stack fake"
        )


def test_a_run_goes_through_every_phase_then_destroys():
    target = FakeTarget()
    outcome = run_bench(target)
    assert target.calls == ["up", "ready", "load", "drain 7", "measure", "destroy", "destroy finished"]
    assert (outcome.status, outcome.summary(), outcome.exit_code) == ("completed", "completed", 0)
    assert list(outcome.phases) == ["up", "ready", "load", "drain", "measure"]
    assert outcome.teardown.summary() == "complete"


def test_missing_events_make_a_completed_run_exit_1():
    target = FakeTarget()
    target.missing = True
    assert run_bench(target).exit_code == 1


def test_a_failed_phase_still_destroys():
    target = FakeTarget(fail_in="load")
    outcome = run_bench(target)
    assert target.calls == ["up", "ready", "load", "destroy", "destroy finished"]
    assert (outcome.status, outcome.detail, outcome.exit_code) == ("failed", "load: the query failed", 1)
    assert outcome.report is None


def _in_child(scenario: Callable[[], Any]) -> Any:
    """What ``scenario`` returns, run in a forked child: the signals it raises reach the child alone, so a guard
    that lets one through kills the child (and fails the test saying so), never the pytest session."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)

    def run() -> None:
        try:
            sender.send(("returned", scenario()))
        except BaseException as error:
            sender.send(("raised", repr(error)))

    process = context.Process(target=run)
    process.start()
    sender.close()
    try:
        got = receiver.recv() if receiver.poll(60) else ("no answer", "in 60 s")
    except EOFError:
        got = ("no answer", "the child closed its end")
    process.join(10)
    assert process.exitcode == 0, f"the child ended with {process.exitcode} (-15: SIGTERM got through), {got}"
    assert got[0] == "returned", got
    return got[1]


def test_sigterm_stops_the_run_and_a_second_signal_does_not_cut_teardown_short():
    def scenario() -> tuple[Any, ...]:
        said: list[str] = []
        target = FakeTarget(signal_in="drain 7")
        target.signal_during_destroy = signal.SIGINT
        with SignalGuard(say=said.append) as guard:
            outcome = run_bench(target, guard=guard)
        return (
            target.calls,
            (outcome.status, outcome.detail, outcome.exit_code),
            list(guard.received),
            said,
            outcome.teardown.complete,
        )

    calls, outcome, received, said, complete = _in_child(scenario)
    assert calls == ["up", "ready", "load", "drain 7", "destroy", "destroy finished"]
    assert outcome == ("interrupted", "SIGTERM during drain", 143)
    assert received == [signal.SIGTERM, signal.SIGINT]
    assert said == [
        "SIGINT received while tearing down fake: finishing it first (it removes what the run created)"
    ]
    assert complete is True


def test_a_signal_in_a_critical_section_waits_for_its_end():
    def scenario() -> tuple[Any, ...]:
        said: list[str] = []
        steps: list[str] = []
        signum = None
        with SignalGuard(say=said.append) as guard:
            try:
                with guard.critical("starting Spark"):
                    signal.raise_signal(signal.SIGTERM)
                    steps.append("Spark started")
                    signal.raise_signal(signal.SIGINT)
                    steps.append("still starting")
            except Interrupted as caught:
                signum = caught.signum
            steps.append("after")
        return steps, signum, said

    steps, signum, said = _in_child(scenario)
    assert steps == ["Spark started", "still starting", "after"]
    assert signum == signal.SIGTERM
    assert said == [
        "SIGTERM received while starting Spark: stopping as soon as that is done (stopped half-way, it would "
        "leave a process or resources nobody can remove)"
    ]


def test_handlers_are_restored_after_the_run():
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    run_bench(FakeTarget())
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_library_keyboard_interrupt_counts_as_sigint():
    target = FakeTarget(fail_in="up", error=KeyboardInterrupt())
    outcome = run_bench(target)
    assert (outcome.status, outcome.detail, outcome.exit_code) == ("interrupted", "SIGINT during up", 130)
    assert target.calls[-2:] == ["destroy", "destroy finished"]


def test_keep_reports_what_is_left_and_how_to_remove_it():
    target = FakeTarget()
    outcome = run_bench(target, keep=True)
    assert target.calls[-1] == "kept"
    assert (
        outcome.teardown.summary()
        == "kept (--keep): left the stack; remove with: lakestack down --stack fake"
    )
    assert outcome.exit_code == 1


def test_a_destroy_that_raises_is_reported_not_raised():
    target = FakeTarget()
    target.destroy_error = RuntimeError("state locked")
    outcome = run_bench(target)
    assert outcome.teardown.summary() == (
        "incomplete: left unknown (RuntimeError while tearing down: state locked); "
        "remove with: lakestack down --stack fake"
    )
    assert outcome.exit_code == 1


def test_an_unexpected_error_is_torn_down_then_raised():
    target = FakeTarget(fail_in="measure", error=TypeError("bug"))
    with pytest.raises(TypeError, match="bug"):
        run_bench(target, known_errors=(RunFailedError,))
    assert target.calls[-2:] == ["destroy", "destroy finished"]


def test_teardown_summaries():
    assert Teardown(complete=True).summary() == "complete"
    assert Teardown(False, ("emulator (pid 7)",), "kill 7").summary() == (
        "incomplete: left emulator (pid 7); remove with: kill 7"
    )
    assert Outcome(status="failed", detail="up: no").summary() == "failed: up: no"
