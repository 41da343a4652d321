"""The run-wide event budget (``--max-events``) and pace (``--target-rate``), held in one place.

In a distributed run the master holds the only :class:`Quota` and workers lease from it by message,
so "exactly N events" and "R events/s in total" hold however users are spread over workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Quota:
    """Leases events to users and counts how they ended.

    Pacing reserves time slots (a virtual schedule, as in GCRA): each lease of ``n`` events moves
    the schedule ``n / rate`` seconds on and tells the caller how long to wait for its slot, so the
    total rate holds without a polling loop.

    Args:
        max_events: total events to lease; None = no limit.
        rate: events per second across all callers; None = unpaced.
        clock: monotonic seconds (injected in tests).
    """

    def __init__(
        self,
        *,
        max_events: int | None = None,
        rate: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events = max_events
        self.rate = rate
        self._clock = clock
        self._next_slot: float | None = None
        self.leased = 0
        self.acknowledged = 0
        self.failed = 0

    @property
    def limited(self) -> bool:
        """True when leases must go through this quota (a budget or a pace is set)."""
        return self.max_events is not None or self.rate is not None

    def lease(self, wanted: int) -> tuple[int, float]:
        """Up to ``wanted`` events: returns (granted, seconds to wait before sending them)."""
        granted = wanted
        if self.max_events is not None:
            granted = max(0, min(wanted, self.max_events - self.leased))
        self.leased += granted
        if self.rate is None or granted == 0:
            return granted, 0.0
        now = self._clock()
        slot = now if self._next_slot is None else max(self._next_slot, now)
        self._next_slot = slot + granted / self.rate
        return granted, slot - now

    def settle(self, acknowledged: int, failed: int) -> bool:
        """Record how leased events ended; True once every event of the budget has ended."""
        self.acknowledged += acknowledged
        self.failed += failed
        return self.finished

    @property
    def finished(self) -> bool:
        """True when a budget is set and every budgeted event was acknowledged or failed."""
        return self.max_events is not None and self.acknowledged + self.failed >= self.max_events

    def exit_code(self) -> int:
        """0 when every event ended acknowledged (and the whole budget was sent), else 1."""
        if self.failed:
            return 1
        if self.max_events is not None and self.acknowledged < self.max_events:
            return 1
        return 0
