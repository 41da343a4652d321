"""A Kinesis producer that tells the truth: PutRecords in bounded batches, per-entry results, retries.

Every PutRecords call is timed with ``time.perf_counter`` and reported to Locust once as a call
(``PutRecords``/``call``) and once per entry (``PutRecords``/``record``: a success for each
acknowledged entry, a failure for each throttled, failed or refused one), so Locust's statistics show
records/s next to calls/s and throttling is never hidden behind a 200 reply. Under Locust the accepted
entries of a reply are logged in one update (``loadtest.stats``); each failed entry fires its own event.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.clients._base import (
    Acknowledged,
    LogRecords,
    OnAcknowledged,
    Producer,
    Rejected,
    RequestFire,
    SendResult,
    record_size,
)
from loadtest.errors import RecordTooLargeError, StreamNotFoundError
from loadtest.events import Event

MAX_ENTRIES_PER_CALL = 500
MAX_BYTES_PER_CALL = 5 * 1024 * 1024
MAX_BYTES_PER_RECORD = 1024 * 1024
MAX_PARTITION_KEY_CHARS = 256
THROTTLED = "ProvisionedThroughputExceededException"
# Entry-level error codes worth another attempt; anything else (e.g. KMS access denied) is final.
RETRYABLE_ENTRY_ERRORS = frozenset({THROTTLED, "InternalFailure", "KMSThrottlingException"})
RETRYABLE_CALL_ERRORS = frozenset(
    {THROTTLED, "InternalFailure", "ServiceUnavailable", "ThrottlingException", "KMSThrottlingException"}
)


def check_event(event: Event) -> None:
    """Refuse an event Kinesis would reject, before it is sent.

    Raises:
        RecordTooLargeError: the record is over 1 MiB or its partition key is empty or over 256 chars.
    """
    size = record_size(event)
    if size > MAX_BYTES_PER_RECORD:
        raise RecordTooLargeError(
            f"event {event.event_id}: expected at most {MAX_BYTES_PER_RECORD} bytes (1 MiB) of data plus "
            f"partition key per Kinesis record, found {size} bytes; it was not sent. Make the payload "
            "smaller or split it into several events."
        )
    if not 1 <= len(event.partition_key) <= MAX_PARTITION_KEY_CHARS:
        raise RecordTooLargeError(
            f"event {event.event_id}: expected a partition key of 1 to {MAX_PARTITION_KEY_CHARS} "
            f"characters, found {len(event.partition_key)}; it was not sent."
        )


def batch_events(
    events: Iterable[Event],
    *,
    max_entries: int = MAX_ENTRIES_PER_CALL,
    max_bytes: int = MAX_BYTES_PER_CALL,
) -> Iterator[list[Event]]:
    """Group events into PutRecords-sized batches (at most ``max_entries`` and ``max_bytes`` each).

    Events are assumed to have passed :func:`check_event`, so each fits in a batch on its own.
    """
    batch: list[Event] = []
    size = 0
    for event in events:
        event_size = record_size(event)
        if batch and (len(batch) >= max_entries or size + event_size > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(event)
        size += event_size
    if batch:
        yield batch


# Attempts per entry. Kinesis meters a shard per second, so throttling comes in one-second windows: the
# retries must outlast a window. Ten attempts wait up to 9.2 s (about 4.6 s on average) in all; five waited
# under 0.4 s on average, all inside the window that throttled the entry, and at the emulator's
# put-throttle=0.2 one entry in ~3,000 was given up on.
DEFAULT_MAX_ATTEMPTS = 10


@dataclass(frozen=True)
class RetryPolicy:
    """Full-jitter exponential backoff: sleep uniform(0, min(max_delay_s, base_delay_s * 2**retry)).

    The same fields as the jobs' policy (``jobs._retry.RetryPolicy``); the load generator ships on its own.

    Attributes:
        max_attempts: total PutRecords attempts per entry, the first one included.
        base_delay_s: the backoff ceiling of the first retry.
        max_delay_s: the backoff ceiling never grows past this.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first retry)."""
        return rng.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**retry))


class KinesisProducer(Producer):
    """Sends events with PutRecords and reports every call and entry to Locust.

    Args:
        client: a boto3 Kinesis client (or anything with the same ``put_records``).
        stream_name: the target stream.
        fire: ``environment.events.request.fire``; None reports nothing (plain scripts).
        log_records: logs a reply's accepted entries into Locust's statistics at once
            (:func:`loadtest.stats.record_logger`); None fires a request event per entry.
        retry: backoff policy for throttled and failed entries.
        sleep: how to wait between attempts (gevent-patched ``time.sleep`` under Locust).
        rng: randomness for the jitter.
    """

    def __init__(
        self,
        client: Any,
        stream_name: str,
        *,
        fire: RequestFire | None = None,
        log_records: LogRecords | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(fire=fire, log_records=log_records)
        self._client = client
        self.stream_name = stream_name
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()

    request_type = "PutRecords"

    def _context(self) -> dict[str, str]:
        return {"stream": self.stream_name}

    def _call(self, batch: Sequence[Event]) -> tuple[list[dict[str, Any]] | None, Exception | None]:
        entries = [{"Data": e.data, "PartitionKey": e.partition_key} for e in batch]
        # record_size() inlined: this runs for every entry of every call.
        sizes = [len(e.data) + len(e.partition_key.encode()) for e in batch]
        length = sum(sizes)
        started = time.time()
        t0 = time.perf_counter()
        try:
            reply = self._client.put_records(StreamName=self.stream_name, Records=entries)
        except Exception as exc:  # botocore raises many unrelated types; each is reported, not swallowed.
            elapsed = (time.perf_counter() - t0) * 1000
            self._report("call", started, elapsed, length, exc)
            if aws_error_code(exc) == "ResourceNotFoundException":
                raise StreamNotFoundError(
                    f"stream {self.stream_name!r}: expected it to exist at the endpoint, found none "
                    f"({exc}). Create it (`lakestack local up`, `pulumi up`) or pass --stream."
                ) from exc
            return None, exc
        elapsed = (time.perf_counter() - t0) * 1000
        self._report("call", started, elapsed, length, None)
        records = reply["Records"]
        self._report_records(started, elapsed, sizes, [rec.get("ErrorCode") for rec in records])
        return records, None

    def send(
        self,
        batch: Sequence[Event],
        *,
        on_acknowledged: OnAcknowledged | None = None,
    ) -> SendResult:
        """Send one batch (<= 500 entries, <= 5 MiB), resending only the entries that failed.

        Whole-call errors (connection reset, throttling of the call) resend the whole remainder;
        entry errors resend exactly those entries. After ``retry.max_attempts`` attempts the rest
        are returned as failed. ``on_acknowledged`` gets each reply's accepted entries before any
        backoff, so a ledger written from it is complete even if the caller is stopped while waiting.

        Raises:
            StreamNotFoundError: the stream does not exist.
        """
        result = SendResult()
        pending = list(batch)
        attempt = 0
        while pending:
            records, exc = self._call(pending)
            result.calls += 1
            attempt += 1
            if records is None:
                result.call_errors += 1
                retry_next = self._sort_call_failure(pending, exc, result)
            else:
                retry_next = self._sort_entries(pending, records, result, on_acknowledged)
            if retry_next and attempt >= self._retry.max_attempts:
                result.failed.extend(
                    Rejected(e, "RetriesExhausted", f"throttled or failed on all {attempt} attempts")
                    for e in retry_next
                )
                retry_next = []
            if retry_next:
                result.retried += len(retry_next)
                self._sleep(self._retry.delay(attempt - 1, self._rng))
            pending = retry_next
        return result

    @staticmethod
    def _sort_call_failure(pending: list[Event], exc: Exception | None, result: SendResult) -> list[Event]:
        """A failed call: every pending entry is retried, or failed when the error is final."""
        code = aws_error_code(exc) or type(exc).__name__
        if code == THROTTLED:
            result.throttled_attempts += len(pending)
        if _call_retryable(exc):
            return list(pending)
        result.failed.extend(Rejected(event, code, str(exc)) for event in pending)
        return []

    @staticmethod
    def _sort_entries(
        pending: list[Event],
        records: list[dict[str, Any]],
        result: SendResult,
        on_acknowledged: OnAcknowledged | None,
    ) -> list[Event]:
        """A reply: accepted entries are acknowledged, retryable ones returned, the rest failed."""
        retry_next: list[Event] = []
        accepted: list[Acknowledged] = []
        for event, rec in zip(pending, records, strict=True):
            entry_code: str | None = rec.get("ErrorCode")
            if not entry_code:
                accepted.append(Acknowledged(event, rec["ShardId"], rec["SequenceNumber"]))
                continue
            if entry_code == THROTTLED:
                result.throttled_attempts += 1
            if entry_code in RETRYABLE_ENTRY_ERRORS:
                retry_next.append(event)
            else:
                result.failed.append(Rejected(event, entry_code, rec.get("ErrorMessage", "")))
        result.acknowledged.extend(accepted)
        if on_acknowledged is not None and accepted:
            on_acknowledged(accepted)
        return retry_next


def aws_error_code(exc: BaseException | None) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (e.g. ``ResourceNotFoundException``), else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


def make_kinesis_client(*, region: str, endpoint_url: str | None) -> Any:
    """A boto3 Kinesis client with botocore's own retries off: the producer retries, and reports every try.

    botocore's parameter validation is off too: :func:`check_event` has already refused every entry Kinesis
    would (size, partition key) with a clearer message, and the entries are built by the producer with the
    right types; validating 500 entries again per call cost about a tenth of a load generator's CPU.
    """
    import boto3
    from botocore.config import Config

    return boto3.client(
        "kinesis",
        region_name=region,
        endpoint_url=endpoint_url,
        config=Config(retries={"total_max_attempts": 1}, max_pool_connections=50, parameter_validation=False),
    )


def _call_retryable(exc: BaseException | None) -> bool:
    code = aws_error_code(exc)
    if code is not None:
        return code in RETRYABLE_CALL_ERRORS
    # No service error code: a transport problem (connection reset, timeout) - worth another try.
    return True
