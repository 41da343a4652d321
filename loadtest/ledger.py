"""The ledger: one JSON line per entry the stream acknowledged, for reconciling against the lake."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from loadtest.errors import LoadTestError


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
        self._file.write(
            "".join(
                json.dumps(
                    {
                        "event_id": e.event_id,
                        "event_time": e.event_time,
                        "shard_id": e.shard_id,
                        "sequence_number": e.sequence_number,
                    },
                    separators=(",", ":"),
                )
                + "\n"
                for e in entries
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
