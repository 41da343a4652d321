"""Bounded, jittered retries for transient storage errors."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from deltalake.exceptions import CommitFailedError

from jobs.lake.errors import LakeWriteError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed write.

    Attributes:
        attempts: total tries, the first included.
        base_delay_s: first backoff cap; doubles each try (full jitter: sleep uniform(0, cap)).
        max_delay_s: upper bound of one backoff.
    """

    attempts: int = 5
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(f"expected attempts >= 1 and 0 <= base_delay_s <= max_delay_s, found {self!r}.")


def is_transient(error: BaseException) -> bool:
    """True for errors a retry can cure: network/object-store I/O and lost commit races.

    delta-rs surfaces object-store failures (timeouts, 5xx, throttling) as ``OSError``; missing files and
    denied access are ``OSError`` subclasses too but retrying them cannot help.
    """
    if isinstance(error, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    return isinstance(error, OSError | CommitFailedError | ConnectionError | TimeoutError)


def with_retries(
    action: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run ``action``; on a transient error retry with full-jitter backoff, then raise ``LakeWriteError``.

    ``action`` must be safe to repeat: the lake append re-reads the table's transaction version on every
    try, so a commit that succeeded before its reply was lost is skipped rather than written twice.
    """
    rules = policy or RetryPolicy()
    random_source = rng or random.Random()
    for attempt in range(1, rules.attempts + 1):
        try:
            return action()
        except Exception as error:
            if not is_transient(error):
                raise
            if attempt == rules.attempts:
                raise LakeWriteError(
                    f"{what} failed {attempt} times with transient storage errors; last: "
                    f"{type(error).__name__}: {error}. Check that the storage is reachable and retry the query; "
                    "the batch was not committed and will be replayed from the checkpoint."
                ) from error
            cap = min(rules.max_delay_s, rules.base_delay_s * 2 ** (attempt - 1))
            delay = random_source.uniform(0, cap)
            log.warning(
                "%s: attempt %d failed (%s: %s); retrying in %.2fs",
                what,
                attempt,
                type(error).__name__,
                error,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")
