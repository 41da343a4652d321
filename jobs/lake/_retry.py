"""What the lake retries: transient storage errors, under the jobs' one :class:`~jobs._retry.RetryPolicy`."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from deltalake.exceptions import CommitFailedError

from jobs._retry import Retrier, RetryPolicy
from jobs.errors import one_line
from jobs.lake.errors import LakeWriteError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Lake writes are slower than Kinesis calls: fewer attempts, a longer first backoff.
LAKE_RETRY = RetryPolicy(max_attempts=5, base_delay_s=0.2, max_delay_s=5.0)


def is_transient(error: BaseException) -> bool:
    """True for errors a retry can cure: network/object-store I/O and lost commit races.

    delta-rs surfaces object-store failures (timeouts, 5xx, throttling) as ``OSError``; missing files and
    denied access are ``OSError`` subclasses too but retrying them cannot help.
    """
    if isinstance(error, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if isinstance(error, OSError | CommitFailedError | ConnectionError | TimeoutError):
        return True
    return _delta_spark_conflict(error)


# delta-spark's lost commit races (io.delta.exceptions.*), which reach Python inside py4j's or pyspark's own
# exception types: a rival MERGE, OPTIMIZE or DELETE changed the files this operation read.
_DELTA_CONFLICTS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
)


def _delta_spark_conflict(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return any(name in text for name in _DELTA_CONFLICTS)


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

    def give_up(error: BaseException, attempts: int) -> Exception:
        return LakeWriteError(
            f"{what} failed {attempts} times with transient storage errors; last: "
            f"{type(error).__name__}: {one_line(error)}. Check that the storage is reachable and retry the query; "
            "the batch was not committed and will be replayed from the checkpoint."
        )

    def warn(error: BaseException) -> None:
        log.warning("%s: retrying after %s: %s", what, type(error).__name__, error)

    retrier = Retrier(policy or LAKE_RETRY, retryable=is_transient, give_up=give_up, sleep=sleep, rng=rng)
    return retrier.call(action, on_retry=warn)
