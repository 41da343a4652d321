"""boto3 client creation, error classification and full-jitter retries for the Kinesis source."""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from jobs.sources.errors import KinesisReadError, SourceSettingsError, StreamAccessError, StreamNotFoundError

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
    }
)


def client_error_code(error: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError, else None."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


def http_status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


def make_client(service: str, *, region: str, endpoint_url: str | None, factory: str | None = None) -> Any:
    """Return a boto3 client; credentials come from boto3's default chain.

    ``factory`` is an optional ``"module:callable"`` (or ``"/path/file.py:callable"``) path called as ``callable(service, region=...,
    endpoint_url=...)``: it runs inside Spark's Python processes, where test code cannot monkeypatch, so
    it is how a caller injects a client (fault injection, custom session) by name.
    """
    if factory:
        module_name, _, attr = factory.rpartition(":")
        if module_name.endswith(".py"):
            # A file path works where the module is not on the workers' sys.path (local mode, tests).
            spec = importlib.util.spec_from_file_location(
                f"_lakestack_factory_{abs(hash(module_name))}", module_name
            )
            if spec is None or spec.loader is None:
                raise SourceSettingsError(f"expected a Python file for clientFactory, found {module_name!r}.")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        build = getattr(module, attr)
        return build(service, region=region, endpoint_url=endpoint_url)
    import boto3
    import botocore.session
    from botocore.config import Config

    # Retries are ours (full jitter, counted in the metrics); botocore's own would hide throttling.
    config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=30)
    core = botocore.session.get_session()
    if service == "kinesis":
        # botocore turns every ApproximateArrivalTimestamp into a tz-aware datetime (~10 us each, a fifth of
        # the reader's CPU at 10k records per call); the shard reader converts the raw epoch itself.
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_raw_timestamp)
    return boto3.session.Session(botocore_session=core).client(
        service, region_name=region, endpoint_url=endpoint_url, config=config
    )


def _raw_timestamp(value: Any) -> Any:
    return value


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
class CallStats:
    """Counters of one shard's (or one planning round's) Kinesis calls."""

    calls: int = 0
    throttled: int = 0
    retries: int = 0
    iterator_refreshes: int = 0

    def add(self, other: CallStats) -> None:
        self.calls += other.calls
        self.throttled += other.throttled
        self.retries += other.retries
        self.iterator_refreshes += other.iterator_refreshes


@dataclass(frozen=True)
class RetryPolicy:
    """Full-jitter exponential backoff: sleep uniform(0, min(cap, base * 2**attempt))."""

    max_attempts: int = 8
    base_seconds: float = 0.1
    cap_seconds: float = 5.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap_seconds, self.base_seconds * (2**attempt)))


def is_retryable(error: BaseException) -> bool:
    code = client_error_code(error)
    if code in THROTTLE_CODES or code in TRANSIENT_CODES:
        return True
    status = http_status(error)
    if status is not None and status >= 500:
        return True
    # botocore's connection/read timeouts are not ClientErrors.
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import ReadTimeoutError

    return isinstance(error, BotoConnectionError | ReadTimeoutError)


def explain_access_error(error: BaseException, *, stream: str, region: str, endpoint_url: str | None) -> None:
    """Raise a clear source error for a missing stream or bad credentials/region; return otherwise."""
    code = client_error_code(error)
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
            "kinesis:ListShards/GetShardIterator/GetRecords, and that the region is right."
        ) from error
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, NoRegionError

    if isinstance(error, NoCredentialsError):
        raise StreamAccessError(
            f"no AWS credentials found for Kinesis stream {stream!r} in {where}. Set AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, a profile, or run with an instance role."
        ) from error
    if isinstance(error, EndpointConnectionError | NoRegionError):
        raise StreamAccessError(
            f"could not connect to Kinesis for stream {stream!r} in {where} ({error}). "
            "Check the region name and, for the emulator, that it is running at the endpoint."
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
    """Call ``fn`` and retry throttling/transient failures with full-jitter backoff.

    ``on_retry`` runs before each retry (e.g. to re-acquire a shard iterator after a 500, which is how the
    emulator reports a bad iterator). Non-retryable errors propagate unchanged.
    """
    attempt = 0
    while True:
        stats.calls += 1
        try:
            return fn()
        except Exception as error:
            if not is_retryable(error):
                raise
            if client_error_code(error) in THROTTLE_CODES:
                stats.throttled += 1
            if attempt + 1 >= policy.max_attempts:
                raise KinesisReadError(
                    f"{what} still failed after {policy.max_attempts} attempts with full-jitter backoff "
                    f"(last error: {error}). Kinesis kept throttling or failing; lower the read rate "
                    "(--max-records-per-shard, fewer consumers) or retry the job later."
                ) from error
            stats.retries += 1
            sleep(policy.delay(attempt, rng))
            attempt += 1
            if on_retry is not None:
                on_retry(error)
