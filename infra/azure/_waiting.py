"""Bounded polling for the dynamic providers: a deadline, an interval, and a clock tests can replace."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from infra.azure.errors import DeploymentError

T = TypeVar("T")


@dataclass(frozen=True)
class Waiter:
    """Polls a condition until it holds or ``timeout_seconds`` pass.

    Attributes:
        timeout_seconds: how long to wait in total.
        interval_seconds: pause between two polls.
        sleep, monotonic: the clock; tests pass a fake one so no test ever sleeps.
    """

    timeout_seconds: float = 900.0
    interval_seconds: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)

    def until(self, poll: Callable[[], T | None], *, what: str, advice: str) -> T:
        """Call ``poll`` until it returns something other than ``None``, and return that.

        Raises:
            DeploymentError: naming ``what`` was awaited and ``advice`` on what to do, after the timeout.
        """
        deadline = self.monotonic() + self.timeout_seconds
        while True:
            found = poll()
            if found is not None:
                return found
            if self.monotonic() >= deadline:
                raise DeploymentError(
                    f"timed out after {self.timeout_seconds:.0f} s waiting for {what}; {advice}"
                )
            self.sleep(self.interval_seconds)
