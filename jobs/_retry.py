"""The one retry policy of the jobs: bounded attempts with full-jitter exponential backoff.

The Kinesis source retries throttled and transient AWS calls with it, the lake retries transient storage
errors with it; each says what is retryable and what error to raise once the attempts are spent.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    Attributes:
        max_attempts: total tries, the first included.
        base_delay_s: backoff ceiling of the first retry; it doubles with each retry.
        max_delay_s: the ceiling never grows past this.
    """

    max_attempts: int = 8
    base_delay_s: float = 0.1
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(
                f"expected max_attempts >= 1 and 0 <= base_delay_s <= max_delay_s, found {self!r}."
            )

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to sleep before retry number ``retry`` (0 for the first): uniform(0, ceiling)."""
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2**retry))


@dataclass
class RetryCounts:
    """What a series of calls went through (the source reports these per batch)."""

    calls: int = 0
    retries: int = 0
    throttled: int = 0

    def add(self, other: RetryCounts) -> None:
        self.calls += other.calls
        self.retries += other.retries
        self.throttled += other.throttled


class Retrier:
    """Runs calls under one :class:`RetryPolicy` and one idea of what is worth retrying.

    Args:
        policy: attempts and backoff.
        retryable: True for an error a retry can cure; anything else propagates unchanged.
        give_up: builds the error raised (chained to the last one) once ``policy.max_attempts`` are spent;
            called with the last error and the number of attempts made.
        throttled: True for an error that is throttling (counted apart in :class:`RetryCounts`).
        sleep: injectable for tests.
        rng: source of the jitter.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        retryable: Callable[[BaseException], bool],
        give_up: Callable[[BaseException, int], Exception],
        throttled: Callable[[BaseException], bool] = lambda _error: False,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self._retryable = retryable
        self._give_up = give_up
        self._throttled = throttled
        self._sleep = sleep
        self._rng = rng or random.Random()

    def call(
        self,
        action: Callable[[], T],
        *,
        on_retry: Callable[[BaseException], None] | None = None,
        counts: RetryCounts | None = None,
    ) -> T:
        """Run ``action`` (it must be safe to repeat), retrying as the policy allows.

        Args:
            action: the call.
            on_retry: runs before each retry (e.g. re-acquire a shard iterator).
            counts: calls, retries and throttles are added here.
        """
        tally = counts if counts is not None else RetryCounts()
        attempt = 0
        while True:
            tally.calls += 1
            try:
                return action()
            except Exception as error:
                if not self._retryable(error):
                    raise
                if self._throttled(error):
                    tally.throttled += 1
                attempt += 1
                if attempt >= self.policy.max_attempts:
                    raise self._give_up(error, attempt) from error
                delay = self.policy.delay(attempt - 1, self._rng)
                log.debug(
                    "attempt %d failed (%s: %s); retrying in %.2fs",
                    attempt,
                    type(error).__name__,
                    error,
                    delay,
                )
                tally.retries += 1
                self._sleep(delay)
                if on_retry is not None:
                    on_retry(error)
