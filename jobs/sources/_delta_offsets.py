"""The Delta source's model: positions in a table's history, what each commit contributes, and the rules.

Everything here is plain data and pure functions over a :class:`History` (the log, read elsewhere), so the
rules that decide what a micro-batch reads are table-tested on their own.

A position is where a query stands, like Delta's own source: a table version plus the index of the last
entry read within it, so a batch can stop part-way through a large commit. The JSON form is what Spark
writes to the checkpoint's offset log and must stay readable by every released version::

    {"table": "<metaData.id>", "version": 12, "index": 3, "snapshot": false}   # entries 0..3 of v12 read
    {"table": "<metaData.id>", "version": 12, "index": null, "snapshot": false} # all of v12 and before read
    {"table": "<metaData.id>", "version": 9, "index": 41, "snapshot": true}     # files 0..41 of snapshot v9
    {"table": "<metaData.id>", "pending": "snapshot"}                            # a fresh query, unresolved

Positions are canonical: a batch that reads the last entry of a version ends at ``index: null`` (the whole
version), and a snapshot read to its end is the same position as its version read to its end, so an offset
never changes unless there is something new to read.

A fresh query's start stays *pending* until its first batch resolves it, and that first batch ends at the
resolution (the snapshot version, or the version "latest" meant): replaying that batch after a crash then
reads exactly what it read the first time, whatever was committed to the table since.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from jobs.sources.errors import ChangeCommitError, DeltaLogError

Action = Literal["add", "remove", "cdc"]
# How a fresh query without a resolved start begins: the snapshot, only new commits, or from a moment.
PENDING_SNAPSHOT = "snapshot"
PENDING_LATEST = "latest"
_PENDING_TIMESTAMP = "timestamp:"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One data file a batch reads, with what the executor needs to turn it into rows.

    Attributes:
        path: relative to the table root, URL-decoded (the name storage knows it by).
        size: bytes.
        version: the commit that made it readable (for snapshot files, the snapshot's version).
        timestamp_ms: that commit's timestamp (epoch ms).
        action: ``add`` (rows inserted), ``remove`` (rows deleted) or ``cdc`` (a change-data file).
        partition_values: (column, value) of a partitioned table; strings as the log holds them, or typed.
    """

    path: str
    size: int
    version: int
    timestamp_ms: int
    action: Action = "add"
    partition_values: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Commit:
    """The actions of one commit that matter to a reader.

    Attributes:
        adds / removes: files added or removed with ``dataChange: true``.
        rewrites: files added or removed with ``dataChange: false`` (compaction: same rows, new files).
        cdc: change-data files (written by MERGE, UPDATE, DELETE when the change feed is on).
        schema: the table schema (Delta JSON) when the commit changes the metadata.
        reader_features: reader table features when the commit changes the protocol.
    """

    version: int
    timestamp_ms: int
    operation: str = ""
    adds: tuple[FileEntry, ...] = ()
    removes: tuple[FileEntry, ...] = ()
    rewrites: int = 0
    cdc: tuple[FileEntry, ...] = ()
    schema: Mapping[str, Any] | None = None
    reader_features: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ReadMode:
    """What the stream reads: plain appends (default), the change feed, or appends skipping change commits.

    ``schema`` is the stream's table schema (Delta JSON): a later commit with columns beyond it fails.
    """

    change_feed: bool = False
    skip_change_commits: bool = False
    schema: Mapping[str, Any] | None = None


class History(Protocol):
    """A table's log, as the planner needs it (``jobs.sources._delta_log.DeltaHistory`` reads the real one)."""

    table_uri: str

    def commit(self, version: int) -> Commit: ...

    def snapshot(self, version: int) -> Sequence[FileEntry]: ...

    def first_version_at_or_after(self, timestamp_ms: int) -> int | None: ...


@dataclass(frozen=True)
class DeltaOffset:
    """A position in a table's history (see the module docstring for the JSON form).

    Attributes:
        table_id: the table's ``metaData.id``; a table replaced under the same URI gets a new one.
        version: table version (-1 with ``index=None`` means before version 0).
        index: index of the last entry read within ``version``; None means every entry of it.
        snapshot: ``version`` is read as its snapshot (every live file), not as its commit's changes.
        pending: an unresolved start: ``snapshot``, ``latest`` or ``timestamp:<epoch ms>``.
    """

    table_id: str
    version: int = -1
    index: int | None = None
    snapshot: bool = False
    pending: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.pending is not None:
            return {"table": self.table_id, "pending": self.pending}
        return {
            "table": self.table_id,
            "version": self.version,
            "index": self.index,
            "snapshot": self.snapshot,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> DeltaOffset:
        if raw.get("pending") is not None:
            return cls(str(raw["table"]), pending=str(raw["pending"]))
        index = raw.get("index")
        return cls(
            str(raw["table"]),
            version=int(raw["version"]),
            index=None if index is None else int(index),
            snapshot=bool(raw.get("snapshot", False)),
        )

    @classmethod
    def through(cls, table_id: str, version: int) -> DeltaOffset:
        """Every entry of ``version`` and of the versions before it read."""
        return cls(table_id, version=version)

    @classmethod
    def pending_timestamp(cls, table_id: str, timestamp_ms: int) -> DeltaOffset:
        return cls(table_id, pending=f"{_PENDING_TIMESTAMP}{timestamp_ms}")

    @property
    def pending_timestamp_ms(self) -> int | None:
        if self.pending is None or not self.pending.startswith(_PENDING_TIMESTAMP):
            return None
        return int(self.pending[len(_PENDING_TIMESTAMP) :])

    def describe(self) -> str:
        """For messages: where this position stands, in words."""
        if self.pending is not None:
            return f"a fresh query's start ({self.pending})"
        if self.index is None:
            return f"the end of version {self.version}"
        kind = "snapshot" if self.snapshot else "version"
        return f"entry {self.index} of {kind} {self.version}"


# -- what one commit contributes --------------------------------------------------------------------------


def entries_of(commit: Commit, mode: ReadMode, *, table_uri: str) -> list[FileEntry]:
    """The files a stream reads for one commit, in a fixed order.

    - Appends: the added files. A compaction (only ``dataChange: false`` actions) contributes nothing: its
      rows were read when they were first added.
    - A commit that removes data (DELETE, UPDATE, MERGE, overwrite) fails the query, naming the table and
      version, unless ``skip_change_commits`` (the whole commit is passed over) or ``change_feed`` (its
      change-data files, or failing those its added files as inserts and removed files as deletes).

    Raises:
        ChangeCommitError: the commit removes data and the stream reads appends only.
        DeltaLogError: the commit turns on features this source cannot read, or adds columns the stream's
            schema lacks.
    """
    check_commit(commit, mode, table_uri=table_uri)
    if mode.change_feed:
        if commit.cdc:
            return sorted(commit.cdc, key=lambda e: e.path)
        return sorted(commit.adds, key=lambda e: e.path) + sorted(commit.removes, key=lambda e: e.path)
    if commit.removes or commit.cdc:
        if mode.skip_change_commits:
            return []
        removed = len(commit.removes)
        raise ChangeCommitError(
            f"Delta table {table_uri} version {commit.version} ({commit.operation or 'unknown operation'}) "
            f"removes or rewrites data ({removed} data file(s) removed), and this stream reads appends only. "
            "Either pass skip_change_commits=True to pass over such commits (their changes are not read), "
            "or read_change_feed=True to read inserts, updates and deletes as rows with _change_type."
        )
    return sorted(commit.adds, key=lambda e: e.path)


def schema_conflicts(stream: Mapping[str, Any], table: Mapping[str, Any]) -> list[str]:
    """Columns of a newer table schema the stream cannot emit: new columns and changed types.

    Both are Delta schema JSON (``{"type": "struct", "fields": [...]}``). Columns the stream has and the table
    lacks are fine (older files are read with nulls there).
    """
    known = {f["name"]: f["type"] for f in stream.get("fields", [])}
    problems = []
    for column in table.get("fields", []):
        name, kind = column["name"], column["type"]
        if name not in known:
            problems.append(f"new column {name!r}")
        elif known[name] != kind:
            problems.append(f"column {name!r} changed type from {known[name]} to {kind}")
    return problems


UNSUPPORTED_READER_FEATURES = ("deletionVectors", "columnMapping")


def unsupported_features(reader_features: Sequence[str]) -> list[str]:
    """Reader features this source cannot honour (it reads data files as they are)."""
    return [f for f in reader_features if f in UNSUPPORTED_READER_FEATURES]


def check_commit(commit: Commit, mode: ReadMode, *, table_uri: str) -> None:
    """Fail on a commit whose protocol or schema the stream cannot follow.

    Raises:
        DeltaLogError: naming the table, the version and what changed.
    """
    blocked = unsupported_features(commit.reader_features or ())
    if blocked:
        raise DeltaLogError(
            f"Delta table {table_uri} version {commit.version} turns on reader features {blocked}, which this "
            "source does not read. Keep deletion vectors and column mapping off on tables read as streams."
        )
    if commit.schema is not None and mode.schema is not None:
        problems = schema_conflicts(mode.schema, commit.schema)
        if problems:
            raise DeltaLogError(
                f"Delta table {table_uri} changed its schema at version {commit.version} "
                f"({'; '.join(problems)}) after this stream's schema was fixed. Restart the query to read "
                "with the new schema."
            )


# -- walking the history ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    """The entries of one version (or of one snapshot) and the first of them not read yet."""

    version: int
    snapshot: bool
    entries: Sequence[FileEntry]
    first: int


def _segments(history: History, start: DeltaOffset, last_version: int, mode: ReadMode) -> Iterator[_Segment]:
    """Versions after ``start`` up to ``last_version``, read lazily (a commit is parsed when it is reached)."""
    if start.pending is not None:
        raise DeltaLogError(f"internal: a pending start ({start.pending}) must be resolved before reading")
    if start.snapshot:
        files = history.snapshot(start.version)
        yield _Segment(start.version, True, files, (start.index if start.index is not None else -1) + 1)
        version, first = start.version + 1, 0
    elif start.index is None:
        version, first = start.version + 1, 0
    else:
        version, first = start.version, start.index + 1
    while version <= last_version:
        yield _Segment(
            version, False, entries_of(history.commit(version), mode, table_uri=history.table_uri), first
        )
        version, first = version + 1, 0


def _after(table_id: str, segment: _Segment, index: int) -> DeltaOffset:
    """The canonical position after entry ``index`` of ``segment``."""
    if index == len(segment.entries) - 1:
        return DeltaOffset.through(table_id, segment.version)
    return DeltaOffset(table_id, version=segment.version, index=index, snapshot=segment.snapshot)


@dataclass(frozen=True)
class Limits:
    """Caps of one micro-batch: files, and bytes (a batch always takes at least one file)."""

    max_files: int = 1000
    max_bytes: int | None = None


@dataclass(frozen=True)
class Plan:
    """A planned batch: where it ends and what it reads."""

    end: DeltaOffset
    entries: list[FileEntry] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.entries)


def plan_batch(
    history: History, start: DeltaOffset, last_version: int, limits: Limits, mode: ReadMode
) -> Plan | None:
    """The next batch after a resolved ``start``, up to ``last_version`` and the limits; None when nothing new.

    Versions that contribute nothing (compactions, skipped change commits, empty commits) are walked over
    without moving the position: an offset moves only when there is data.
    """
    taken: list[FileEntry] = []
    size = 0
    end: DeltaOffset | None = None
    for segment in _segments(history, start, last_version, mode):
        for index in range(segment.first, len(segment.entries)):
            entry = segment.entries[index]
            full = len(taken) >= limits.max_files or (
                limits.max_bytes is not None and taken and size + entry.size > limits.max_bytes
            )
            if full:
                return Plan(end, taken) if end is not None else None
            taken.append(entry)
            size += entry.size
            end = _after(start.table_id, segment, index)
    return Plan(end, taken) if end is not None else None


def first_plan(history: History, start: DeltaOffset, latest: int, limits: Limits, mode: ReadMode) -> Plan:
    """The first batch of a fresh query (``start`` pending): it ends at the resolution of the start.

    - ``snapshot``: the first files of the snapshot at ``latest`` (the snapshot's end when it is empty); the
      batch stays inside the snapshot, so its end names the snapshot version.
    - ``latest``: nothing to read; the end is ``latest``.
    - ``timestamp``: nothing to read; the end is just before the first version committed at or after it.
    """
    table_id = start.table_id
    if start.pending == PENDING_SNAPSHOT:
        snapshot = DeltaOffset(table_id, version=latest, index=-1, snapshot=True)
        planned = plan_batch(history, snapshot, latest, limits, mode)
        return planned or Plan(DeltaOffset.through(table_id, latest))
    moment = start.pending_timestamp_ms
    if moment is not None:
        found = history.first_version_at_or_after(moment)
        return Plan(DeltaOffset.through(table_id, latest if found is None else found - 1))
    if start.pending == PENDING_LATEST:
        return Plan(DeltaOffset.through(table_id, latest))
    raise DeltaLogError(f"unknown pending start {start.pending!r} in a Delta source offset")


def resolve_start(history: History, start: DeltaOffset, end: DeltaOffset) -> DeltaOffset:
    """The concrete start of the batch (start, end]: a pending start is resolved as :func:`first_plan` did.

    The resolution depends only on ``end`` and the (immutable) log, so a replayed batch reads what it read.
    """
    if start.pending is None:
        return start
    if start.pending == PENDING_SNAPSHOT:
        return DeltaOffset(start.table_id, version=end.version, index=-1, snapshot=True)
    moment = start.pending_timestamp_ms
    if moment is not None:
        found = history.first_version_at_or_after(moment)
        if found is not None and found - 1 < end.version:
            return DeltaOffset.through(start.table_id, found - 1)
    return end


def entries_between(
    history: History, start: DeltaOffset, end: DeltaOffset, mode: ReadMode
) -> list[FileEntry]:
    """Every entry after a resolved ``start`` up to and including ``end``'s (what partitions() reads).

    Raises:
        DeltaLogError: ``end`` lies inside a snapshot other than the one ``start`` reads (offsets not of
            this table's history).
    """
    if end.snapshot and not (start.snapshot and start.version == end.version):
        raise DeltaLogError(
            f"Delta source offsets do not fit together for {history.table_uri}: a batch from "
            f"{start.describe()} to {end.describe()}. The checkpoint was not written by this query; start "
            "a new checkpoint."
        )
    out: list[FileEntry] = []
    for segment in _segments(history, start, end.version, mode):
        stop = len(segment.entries)
        if segment.version == end.version and end.index is not None:
            stop = end.index + 1
        out.extend(segment.entries[segment.first : stop])
    return out


def pack(entries: Sequence[FileEntry], *, min_tasks: int, task_bytes: int) -> list[list[FileEntry]]:
    """Spread files over tasks: at least ``min_tasks`` (when there are as many files), about ``task_bytes`` each.

    Biggest files first, each to the least loaded task; files keep their order inside a task.
    """
    if not entries:
        return []
    total = sum(e.size for e in entries)
    tasks = max(1, min(len(entries), max(min_tasks, math.ceil(total / max(1, task_bytes)))))
    loads = [0] * tasks
    members: list[list[int]] = [[] for _ in range(tasks)]
    for position in sorted(range(len(entries)), key=lambda i: (-entries[i].size, i)):
        target = min(range(tasks), key=lambda t: (loads[t], t))
        loads[target] += entries[position].size
        members[target].append(position)
    return [[entries[i] for i in sorted(group)] for group in members if group]
