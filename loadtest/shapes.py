"""Load shapes as pure functions of elapsed time: ``tick(seconds) -> (users, spawn_rate) | None``.

An on-demand Kinesis stream absorbs up to twice its previous peak; a faster climb is throttled until
it scales (about 15 minutes). :class:`RampShape` therefore never more than doubles the user count
within any 15-minute window, which is how a stream is pre-warmed before a big test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadtest.errors import OptionError

SHAPES: tuple[str, ...] = ("constant", "ramp", "step", "spike")
ON_DEMAND_DOUBLING_SECONDS = 900.0

Tick = tuple[int, float] | None


def _check_positive(name: str, value: float) -> None:
    if value <= 0:
        raise OptionError(f"shape {name}: expected a value > 0, found {value}.")


@dataclass(frozen=True)
class ConstantShape:
    """``users`` for ``duration`` seconds, then stop."""

    users: int
    duration: float
    spawn_rate: float = 10.0

    def __post_init__(self) -> None:
        _check_positive("users", self.users)
        _check_positive("duration", self.duration)

    def tick(self, elapsed: float) -> Tick:
        """Users and spawn rate at ``elapsed`` seconds; None when the test should stop."""
        if elapsed >= self.duration:
            return None
        return self.users, self.spawn_rate


@dataclass(frozen=True)
class RampShape:
    """Start at ``start_users`` and double every ``doubling_seconds`` (>= 900 s) up to ``max_users``.

    Doubling in steps (not continuously) keeps integer user counts exact: within any window of
    ``doubling_seconds`` at most one doubling happens, so the count at most doubles.
    """

    start_users: int
    max_users: int
    duration: float
    doubling_seconds: float = ON_DEMAND_DOUBLING_SECONDS

    def __post_init__(self) -> None:
        _check_positive("start_users", self.start_users)
        _check_positive("duration", self.duration)
        if self.max_users < self.start_users:
            raise OptionError(
                f"ramp shape: expected max_users >= start_users, found {self.max_users} < {self.start_users}."
            )
        if self.doubling_seconds < ON_DEMAND_DOUBLING_SECONDS:
            raise OptionError(
                f"ramp shape: expected doubling_seconds >= {ON_DEMAND_DOUBLING_SECONDS:.0f} (an on-demand "
                f"stream absorbs 2x its peak per 15 minutes), found {self.doubling_seconds}."
            )

    def tick(self, elapsed: float) -> Tick:
        """Users and spawn rate at ``elapsed`` seconds; None when the test should stop."""
        if elapsed >= self.duration:
            return None
        doublings = math.floor(elapsed / self.doubling_seconds)
        users = min(self.max_users, self.start_users * 2 ** min(doublings, 62))
        # Spread each doubling's new users over about a minute rather than one burst.
        return users, max(1.0, users / 60)


@dataclass(frozen=True)
class StepShape:
    """``start_users``, plus ``step_users`` every ``step_seconds``, capped at ``max_users``."""

    start_users: int
    step_users: int
    step_seconds: float
    max_users: int
    duration: float

    def __post_init__(self) -> None:
        _check_positive("start_users", self.start_users)
        _check_positive("step_seconds", self.step_seconds)
        _check_positive("duration", self.duration)

    def tick(self, elapsed: float) -> Tick:
        """Users and spawn rate at ``elapsed`` seconds; None when the test should stop."""
        if elapsed >= self.duration:
            return None
        users = min(
            self.max_users, self.start_users + self.step_users * math.floor(elapsed / self.step_seconds)
        )
        return users, float(max(1, self.step_users))


@dataclass(frozen=True)
class SpikeShape:
    """``base_users``, jumping to ``peak_users`` during [spike_at, spike_at + spike_seconds)."""

    base_users: int
    peak_users: int
    spike_at: float
    spike_seconds: float
    duration: float

    def __post_init__(self) -> None:
        _check_positive("base_users", self.base_users)
        _check_positive("spike_seconds", self.spike_seconds)
        _check_positive("duration", self.duration)

    def tick(self, elapsed: float) -> Tick:
        """Users and spawn rate at ``elapsed`` seconds; None when the test should stop."""
        if elapsed >= self.duration:
            return None
        if self.spike_at <= elapsed < self.spike_at + self.spike_seconds:
            # The point of a spike is that it arrives at once.
            return self.peak_users, float(self.peak_users)
        return self.base_users, float(self.peak_users)


Shape = ConstantShape | RampShape | StepShape | SpikeShape


def make_shape(name: str, *, users: int, duration: float) -> Shape:
    """The named shape, peaking at ``users`` and lasting ``duration`` seconds.

    ``ramp`` starts at an eighth of ``users`` and doubles every 15 minutes; ``step`` adds a quarter of
    ``users`` every tenth of the duration; ``spike`` holds a quarter of ``users`` and jumps to all of
    them for the middle tenth of the run.
    """
    _check_positive("users", users)
    if name == "constant":
        return ConstantShape(users, duration)
    if name == "ramp":
        return RampShape(max(1, users // 8), users, duration)
    if name == "step":
        return StepShape(max(1, users // 4), max(1, users // 4), duration / 10, users, duration)
    if name == "spike":
        return SpikeShape(max(1, users // 4), users, duration * 0.45, duration / 10, duration)
    raise OptionError(f"--shape: expected one of {', '.join(SHAPES)}, found {name!r}.")
