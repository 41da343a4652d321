"""How the Kinesis source classifies AWS errors and retries its calls (on :mod:`jobs._retry`)."""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from jobs._aws import error_code, http_status
from jobs._retry import Retrier, RetryCounts, RetryPolicy
from jobs.sources.errors import KinesisReadError, StreamAccessError, StreamNotFoundError

T = TypeVar("T")

# Codes Kinesis returns when a shard or the account is over its limits: always worth a retry with backoff.
THROTTLE_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException"}
)
# Server-side or transport trouble that a retry usually cures.
TRANSIENT_CODES = frozenset(
    {"InternalFailure", "InternalServerError", "ServiceUnavailable", "KMSThrottlingException"}
)
EXPIRED_CODES = frozenset({"ExpiredIteratorException"})
ACCESS_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "AccessDeniedException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        # An encrypted stream's records need kms:Decrypt on its key, and the key must be usable.
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSNotFoundException",
        "KMSInvalidStateException",
        "KMSOptInRequired",
    }
)


def epoch_micros(value: Any) -> int:
    """Microseconds since the epoch of a timestamp as botocore returns it (datetime) or raw (number/text)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, int | float):
        return round(value * 1_000_000)
    text = str(value)
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        return epoch_micros(dt.datetime.fromisoformat(text))


@dataclass
class CallStats(RetryCounts):
    """Counters of one shard's (or one planning round's) Kinesis calls: retries, and iterator refreshes."""

    iterator_refreshes: int = 0

    def add(self, other: RetryCounts) -> None:
        super().add(other)
        if isinstance(other, CallStats):
            self.iterator_refreshes += other.iterator_refreshes


def is_throttled(error: BaseException) -> bool:
    return error_code(error) in THROTTLE_CODES


def is_retryable(error: BaseException) -> bool:
    code = error_code(error)
    if code in THROTTLE_CODES or code in TRANSIENT_CODES:
        return True
    status = http_status(error)
    if status is not None and status >= 500:
        return True
    # Transport errors are not ClientErrors: no connection (refused, DNS, connect timeout) and a reply that never
    # came whole (connection reset or closed, read timeout). The same two families botocore's own retries treat as
    # transient; a connection reset is a ConnectionClosedError, not a ConnectionError.
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    return isinstance(error, BotoConnectionError | HTTPClientError)


def explain_access_error(error: BaseException, *, stream: str, region: str, endpoint_url: str | None) -> None:
    """Raise a clear source error for a missing stream or bad credentials/region; return otherwise."""
    code = error_code(error)
    where = f"region {region!r}" + (f" at endpoint {endpoint_url}" if endpoint_url else "")
    if code == "ResourceNotFoundException":
        raise StreamNotFoundError(
            f"expected Kinesis stream {stream!r} in {where}, but it was not found ({error}). "
            "Check the stream name and the region (--region), or create the stream first."
        ) from error
    if code in ACCESS_CODES:
        raise StreamAccessError(
            f"could not read Kinesis stream {stream!r} in {where}: {code} ({error}). "
            "Check the credentials boto3 finds (env, profile or instance role), that they allow "
            "kinesis:DescribeStreamSummary/ListShards/GetShardIterator/GetRecords (and kms:Decrypt on an "
            "encrypted stream's key), and that the region is right."
        ) from error
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, NoRegionError

    if isinstance(error, NoCredentialsError):
        raise StreamAccessError(
            f"no AWS credentials found for Kinesis stream {stream!r} in {where}. Set AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, a profile, or run with an instance role."
        ) from error
    if isinstance(error, EndpointConnectionError | NoRegionError):
        hint = (
            "Is the emulator running there? `lakestack local up` starts it; pass the endpoint it prints."
            if endpoint_url
            else "Check the region name (--region) and the network."
        )
        raise StreamAccessError(
            f"could not connect to Kinesis for stream {stream!r} in {where} ({error}). {hint}"
        ) from error


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy,
    stats: CallStats,
    rng: random.Random,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Call ``fn``, retrying throttling and transient failures under ``policy`` (see :mod:`jobs._retry`).

    ``what`` names the call in the error raised once the attempts are spent; ``on_retry`` runs before each
    retry (e.g. to re-acquire a shard iterator after a 500, which is how the emulator reports a bad one).
    Non-retryable errors propagate unchanged.
    """

    def give_up(error: BaseException, attempts: int) -> Exception:
        return KinesisReadError(
            f"{what} still failed after {attempts} attempts with full-jitter backoff "
            f"(last error: {error}). Kinesis kept throttling or failing; lower the read rate "
            "(--max-records-per-shard, fewer consumers) or retry the job later."
        )

    retrier = Retrier(
        policy, retryable=is_retryable, give_up=give_up, throttled=is_throttled, sleep=sleep, rng=rng
    )
    return retrier.call(fn, on_retry=on_retry, counts=stats)
