"""The ledger: one JSON line per entry the stream acknowledged, for reconciling against the lake; beside it,
each Locust process's producer counts (calls, throttled and resent entries), so a report can say what the
producer went through to get there."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import IO, TYPE_CHECKING

from loadtest.errors import LoadTestError

if TYPE_CHECKING:
    from loadtest.clients._base import Acknowledged, SendResult


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One acknowledged event: its id and time, and where the stream put it."""

    event_id: str
    event_time: str
    shard_id: str
    sequence_number: str


def ledger_file_name(*, hostname: str | None = None, pid: int | None = None) -> str:
    """``ledger-<hostname>-<pid>.jsonl``: one file per Locust process, so workers never share a file."""
    return f"ledger-{hostname or socket.gethostname()}-{pid if pid is not None else os.getpid()}.jsonl"


class LedgerWriter:
    """Appends acknowledged entries to ``DIR/ledger-<hostname>-<pid>.jsonl``.

    Call :meth:`write` once per PutRecords reply: it flushes, so a killed process loses at most the
    reply in flight.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / ledger_file_name()
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def write(self, entries: Iterable[LedgerEntry]) -> None:
        """Append entries and flush."""
        if self._file is None:
            raise LoadTestError(f"ledger {self.path}: expected an open ledger, found it closed.")
        # The same line json.dumps(dict, separators=(",", ":")) gives, with each string quoted by json's C
        # encoder: a third of the cost, and the ledger is written for every acknowledged entry.
        quote = encode_basestring_ascii
        self._file.write(
            "".join(
                f'{{"event_id":{quote(e.event_id)},"event_time":{quote(e.event_time)},'
                f'"shard_id":{quote(e.shard_id)},"sequence_number":{quote(e.sequence_number)}}}\n'
                for e in entries
            )
        )
        self._file.flush()

    def write_acknowledged(self, acknowledged: Sequence[Acknowledged]) -> None:
        """Append one reply's accepted entries and flush: the lines :meth:`write` gives, without building a
        :class:`LedgerEntry` per entry first (a third of the ledger's cost, paid for every acknowledged entry)."""
        if self._file is None:
            raise LoadTestError(f"ledger {self.path}: expected an open ledger, found it closed.")
        quote = encode_basestring_ascii
        self._file.write(
            "".join(
                [
                    f'{{"event_id":{quote(event.event_id)},"event_time":{quote(event.event_time)},'
                    f'"shard_id":{quote(shard_id)},"sequence_number":{quote(sequence_number)}}}\n'
                    for event, shard_id, sequence_number in acknowledged
                ]
            )
        )
        self._file.flush()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def read_ledger(path: str | Path) -> list[LedgerEntry]:
    """Read one ledger file, or every ``ledger-*.jsonl`` in a directory (sorted by file name).

    Raises:
        LoadTestError: the path does not exist, or a line is not a ledger entry (file and line named).
    """
    target = Path(path)
    if target.is_dir():
        files = sorted(target.glob("ledger-*.jsonl"))
    elif target.is_file():
        files = [target]
    else:
        raise LoadTestError(
            f"ledger: expected a ledger file or a directory of ledger-*.jsonl at {target}, found nothing. "
            "Pass the --ledger directory the load test wrote to."
        )
    entries: list[LedgerEntry] = []
    for file in files:
        with file.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    entries.append(
                        LedgerEntry(
                            str(row["event_id"]),
                            str(row["event_time"]),
                            str(row["shard_id"]),
                            str(row["sequence_number"]),
                        )
                    )
                except (ValueError, KeyError, TypeError) as exc:
                    raise LoadTestError(
                        f"ledger {file}:{number}: expected a JSON object with event_id, event_time, shard_id "
                        f"and sequence_number, found {line.strip()[:120]!r} ({exc})."
                    ) from exc
    return entries


@dataclass(slots=True)
class ProducerStats:
    """What one producer process (or, summed, a whole run) did to get its events acknowledged.

    Attributes:
        calls: PutRecords (or produce) calls, retries included.
        acknowledged: entries the stream accepted.
        failed: entries given up on (a final error, or every attempt spent): never acknowledged.
        throttled: entry attempts answered with throttling (ProvisionedThroughputExceededException).
        retried: entries sent again after a failed attempt.
        call_errors: calls that failed as a whole (5xx, connection trouble, a throttled call).
    """

    calls: int = 0
    acknowledged: int = 0
    failed: int = 0
    throttled: int = 0
    retried: int = 0
    call_errors: int = 0

    def add(self, result: SendResult, *, refused: int = 0) -> None:
        """Count one batch's outcome (``refused``: events refused before sending, e.g. too large)."""
        self.calls += result.calls
        self.acknowledged += len(result.acknowledged)
        self.failed += len(result.failed) + refused
        self.throttled += result.throttled_attempts
        self.retried += result.retried
        self.call_errors += result.call_errors

    def merge(self, other: ProducerStats) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def producer_stats_file_name(*, hostname: str | None = None, pid: int | None = None) -> str:
    """``producer-<hostname>-<pid>.json``, next to the same process's ledger file."""
    return f"producer-{hostname or socket.gethostname()}-{pid if pid is not None else os.getpid()}.json"


def write_producer_stats(directory: str | Path, stats: ProducerStats) -> Path:
    """Write this process's producer counts into the ledger directory (replacing an earlier write)."""
    path = Path(directory) / producer_stats_file_name()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(stats)) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_producer_stats(directory: str | Path) -> ProducerStats | None:
    """The producer counts of every process that wrote into ``directory``, summed; None when none did.

    Raises:
        LoadTestError: a file is not producer counts (the file is named).
    """
    files = sorted(Path(directory).glob("producer-*.json"))
    if not files:
        return None
    total = ProducerStats()
    names = {f.name for f in fields(ProducerStats)}
    for file in files:
        try:
            row = json.loads(file.read_text(encoding="utf-8"))
            total.merge(ProducerStats(**{key: int(row[key]) for key in names}))
        except (ValueError, KeyError, TypeError) as exc:
            raise LoadTestError(
                f"producer counts {file}: expected a JSON object with {sorted(names)}, found "
                f"{file.read_text(encoding='utf-8')[:120]!r} ({exc})."
            ) from exc
    return total
