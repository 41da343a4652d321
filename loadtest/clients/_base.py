"""What both producers share: the outcome types of a send and the reporting to Locust's request event."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from loadtest.errors import RecordTooLargeError
from loadtest.events import Event

_log = logging.getLogger(__name__)

RequestFire = Callable[..., None]
# (request_type, name, response_time_ms, total_bytes, count): many successful requests logged at once
# (``loadtest.stats.record_logger`` under Locust).
LogRecords = Callable[[str, str, float, int, int], None]


def record_size(event: Event) -> int:
    """Bytes Kinesis meters for one entry: the data blob plus the UTF-8 partition key."""
    return len(event.data) + len(event.partition_key.encode())


class Acknowledged(NamedTuple):
    """An entry the stream accepted.

    A named tuple, not a frozen dataclass: one is made for every acknowledged entry, and a frozen dataclass's
    ``__init__`` (``object.__setattr__`` per field) cost twice a named tuple's (0.6-0.7 us against 0.3 us here).
    """

    event: Event
    shard_id: str
    sequence_number: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """An entry that was not accepted, with the stream's error code (or ours) and message."""

    event: Event
    error_code: str
    error_message: str


@dataclass(slots=True)
class SendResult:
    """What became of a batch after retries.

    Attributes:
        acknowledged: entries the stream accepted.
        failed: entries given up on (a final error, or every attempt spent).
        throttled_attempts: entry attempts answered with throttling (whole throttled calls count each entry).
        calls: calls made, retries included.
        retried: entries sent again after a failed attempt (each resend counts).
        call_errors: calls that failed as a whole (5xx, connection trouble, a throttled call).
    """

    acknowledged: list[Acknowledged] = field(default_factory=list)
    failed: list[Rejected] = field(default_factory=list)
    throttled_attempts: int = 0
    calls: int = 0
    retried: int = 0
    call_errors: int = 0


class EntryFailure(Exception):
    """Passed to Locust's request event for each entry that was not accepted (not raised)."""


OnAcknowledged = Callable[[list[Acknowledged]], None]


class Producer(ABC):
    """Sends batches of events to one stream and reports calls and records to Locust as ``request_type``
    requests, with the ``_context()`` target."""

    request_type: str

    def __init__(self, *, fire: RequestFire | None = None, log_records: LogRecords | None = None) -> None:
        self._fire = fire
        self._log_records = log_records

    @abstractmethod
    def send(self, batch: Sequence[Event], *, on_acknowledged: OnAcknowledged | None = None) -> SendResult:
        """Send one batch; ``on_acknowledged`` gets the accepted entries as soon as the stream confirms them."""

    @abstractmethod
    def _context(self) -> dict[str, str]:
        """What the requests reported to Locust target (stream or topic)."""

    def _report(
        self, name: str, started: float, elapsed_ms: float, length: int, exc: Exception | None
    ) -> None:
        if self._fire is not None:
            self._fire(
                request_type=self.request_type,
                name=name,
                response_time=elapsed_ms,
                response_length=length,
                exception=exc,
                context=self._context(),
                start_time=started,
                url=None,
            )

    def _report_records(
        self, started: float, elapsed_ms: float, sizes: Sequence[int], errors: Sequence[str | None]
    ) -> None:
        """Report each entry of a reply as a ``record`` request: a success, or a failure with its error code.

        With ``log_records`` the accepted entries go into the statistics as one update per reply and only the
        failed ones fire a request event each; without it every entry fires one (plain scripts, listeners that
        want every record).
        """
        if self._fire is None:
            return
        fire, context, kind = self._fire, self._context(), self.request_type
        log_records = self._log_records
        if log_records is not None:
            accepted = [size for size, code in zip(sizes, errors, strict=True) if not code]
            try:
                log_records(kind, "record", elapsed_ms, sum(accepted), len(accepted))
            except Exception:
                # The statistics are a view; the ledger, written after this, is the truth of what was stored.
                _log.exception("could not add %d accepted records to the statistics", len(accepted))
            if len(accepted) == len(sizes):
                return
        for size, code in zip(sizes, errors, strict=True):
            if log_records is not None and not code:
                continue
            fire(
                request_type=kind,
                name="record",
                response_time=elapsed_ms,
                response_length=size,
                exception=None if not code else EntryFailure(code),
                context=context,
                start_time=started,
                url=None,
            )

    def refuse(self, event: Event, error: RecordTooLargeError) -> Rejected:
        """Report an event that failed ``check_event`` as a failed record (it is never sent)."""
        self._report("record", time.time(), 0.0, record_size(event), error)
        return Rejected(event, "RecordTooLarge", str(error))
