"""I/O of the Delta source: the driver reads a table's log (commits, snapshots), executors read its files.

The log is read with delta-rs (snapshots, the latest version) and as the commit JSON files themselves (one
commit's actions, which delta-rs does not expose); data files are read with pyarrow, through
``jobs._files.filesystem_for`` (delta-rs' own object store with the table's storage options for remote
tables), so the source reaches exactly what the lake layer writes to (S3, ADLS Gen2, the emulator).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from jobs._files import filesystem_for, join
from jobs.sources._delta_offsets import Commit, FileEntry
from jobs.sources.errors import DeltaLogError, DeltaTableNotFoundError, MissingDataFileError

COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_TYPE = "_change_type"
METADATA_COLUMNS = (COMMIT_VERSION, COMMIT_TIMESTAMP, CHANGE_TYPE)
_BATCH_ROWS = 64 * 1024


# -- the driver side: the log -----------------------------------------------------------------------------


def _entry(raw: Mapping[str, Any], version: int, timestamp_ms: int, action: str) -> FileEntry:
    values = raw.get("partitionValues") or {}
    return FileEntry(
        path=unquote(str(raw["path"])),
        size=int(raw.get("size") or 0),
        version=version,
        timestamp_ms=timestamp_ms,
        action=action,  # type: ignore[arg-type]
        partition_values=tuple(sorted(values.items())),
    )


def parse_commit(version: int, text: str) -> Commit:
    """One commit file (newline-delimited JSON actions) as a :class:`Commit`."""
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    timestamp_ms = int(info.get("timestamp") or info.get("inCommitTimestamp") or 0)
    if not timestamp_ms:
        # No commitInfo timestamp (other writers): the newest file time is the best stand-in.
        times = [int(a["add"].get("modificationTime") or 0) for a in actions if "add" in a]
        timestamp_ms = max(times, default=0)
    adds: list[FileEntry] = []
    removes: list[FileEntry] = []
    cdc: list[FileEntry] = []
    rewrites = 0
    schema: dict[str, Any] | None = None
    features: tuple[str, ...] | None = None
    for action in actions:
        if "add" in action or "remove" in action:
            kind = "add" if "add" in action else "remove"
            raw = action[kind]
            if raw.get("dataChange", True):
                (adds if kind == "add" else removes).append(_entry(raw, version, timestamp_ms, kind))
            else:
                rewrites += 1
        elif "cdc" in action:
            cdc.append(_entry(action["cdc"], version, timestamp_ms, "cdc"))
        elif "metaData" in action:
            schema = json.loads(action["metaData"]["schemaString"])
        elif "protocol" in action:
            features = tuple(action["protocol"].get("readerFeatures") or ())
    return Commit(
        version=version,
        timestamp_ms=timestamp_ms,
        operation=str(info.get("operation", "")),
        adds=tuple(adds),
        removes=tuple(removes),
        rewrites=rewrites,
        cdc=tuple(cdc),
        schema=schema,
        reader_features=features,
    )


def open_table(table_uri: str, storage_options: Mapping[str, str], *, version: int | None = None) -> Any:
    """delta-rs' ``DeltaTable`` at ``table_uri``.

    Raises:
        DeltaTableNotFoundError: there is no Delta table there.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(table_uri, version=version, storage_options=dict(storage_options) or None)
    except TableNotFoundError as error:
        raise DeltaTableNotFoundError(
            f"expected a Delta table at {table_uri}, found no _delta_log there. Start the job that writes it "
            "first (for bronze: `python -m jobs ingest`, which creates it at start-up), or fix the URI."
        ) from error


class DeltaHistory:
    """A table's history as the planner reads it (see ``_delta_offsets.History``), with parsed commits cached.

    Commits are immutable, so the cache never goes stale; it is bounded because a query that waits at one
    position re-walks the same versions every trigger.
    """

    def __init__(self, table_uri: str, storage_options: Mapping[str, str], *, cache_size: int = 1024) -> None:
        self.table_uri = table_uri
        self._options = dict(storage_options)
        self._fs, self._root = filesystem_for(table_uri, self._options)
        self._table: Any = None
        self._commits: OrderedDict[int, Commit] = OrderedDict()
        self._cache_size = cache_size
        self._snapshot: tuple[int, list[FileEntry]] | None = None

    def table(self) -> Any:
        if self._table is None:
            self._table = open_table(self.table_uri, self._options)
        return self._table

    def latest_version(self) -> int:
        """The newest version (the log is listed again)."""
        table = self.table()
        table.update_incremental()
        return int(table.version())

    def table_id(self) -> str:
        return str(self.table().metadata().id)

    def commit(self, version: int) -> Commit:
        """The actions of ``version``, read from its commit file.

        Raises:
            DeltaLogError: the commit file is gone (the log was cleaned up past it).
        """
        cached = self._commits.get(version)
        if cached is not None:
            self._commits.move_to_end(version)
            return cached
        path = join(self._root, f"_delta_log/{version:020d}.json")
        try:
            with self._fs.open_input_stream(path) as stream:
                text = stream.read().decode("utf-8")
        except (FileNotFoundError, OSError) as error:
            if not _is_not_found(error):
                raise
            raise DeltaLogError(
                f"Delta table {self.table_uri}: the commit of version {version} is no longer in the log "
                f"(_delta_log/{version:020d}.json); the log was cleaned up past this query's position. Start "
                "a new checkpoint (it reads the table from a snapshot), and keep the table's "
                "delta.logRetentionDuration longer than a query may fall behind."
            ) from error
        commit = parse_commit(version, text)
        self._commits[version] = commit
        if len(self._commits) > self._cache_size:
            self._commits.popitem(last=False)
        return commit

    def snapshot(self, version: int) -> list[FileEntry]:
        """Every live file of the table at ``version``, oldest first (one snapshot is kept in memory)."""
        if self._snapshot is not None and self._snapshot[0] == version:
            return self._snapshot[1]
        table = open_table(self.table_uri, self._options, version=version)
        try:
            timestamp_ms = self.commit(version).timestamp_ms
        except DeltaLogError:
            timestamp_ms = 0
        # Through the Arrow stream protocol, not pa.table(): that first asks whether it got a pandas
        # DataFrame, which imports pandas (~0.35 CPU-s in the planner's fresh process, every query start).
        actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
        partition_columns = [c for c in actions.column_names if c.startswith("partition.")]
        rows = actions.select(["path", "size_bytes", "modification_time", *partition_columns]).to_pylist()
        # Oldest files first, as Delta's own source reads a snapshot; the path breaks ties.
        rows.sort(key=lambda row: (_epoch_ms(row["modification_time"]), str(row["path"])))
        entries = [
            FileEntry(
                path=unquote(str(row["path"])),
                size=int(row["size_bytes"] or 0),
                version=version,
                timestamp_ms=timestamp_ms,
                partition_values=tuple(sorted((c[len("partition.") :], row[c]) for c in partition_columns)),
            )
            for row in rows
        ]
        self._snapshot = (version, entries)
        return entries

    def first_version_at_or_after(self, timestamp_ms: int) -> int | None:
        """The first version committed at or after ``timestamp_ms`` (epoch ms); None when none is yet."""
        version = self.latest_version()
        if self.commit(version).timestamp_ms < timestamp_ms:
            return None
        while version > 0:
            try:
                earlier = self.commit(version - 1)
            except DeltaLogError:
                break
            if earlier.timestamp_ms < timestamp_ms:
                break
            version -= 1
        return version


def _epoch_ms(value: Any) -> int:
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    return int(value or 0)


def _is_not_found(error: BaseException) -> bool:
    if isinstance(error, FileNotFoundError):
        return True
    text = str(error).lower()
    return "not found" in text or "nosuchkey" in text or "no such file" in text or "404" in text


# -- the executor side: files to rows ---------------------------------------------------------------------


def _parse_timestamp(raw: str, kind: pa.DataType) -> dt.datetime:
    moment = dt.datetime.fromisoformat(raw.replace(" ", "T"))
    if moment.tzinfo is None and getattr(kind, "tz", None) is not None:
        moment = moment.replace(tzinfo=dt.UTC)  # the log spells UTC timestamps without a zone
    return moment


# How the log spells a partition value of each type (Delta protocol, "Partition Value Serialization").
_PARTITION_PARSERS: tuple[tuple[Callable[[pa.DataType], bool], Callable[[str, pa.DataType], Any]], ...] = (
    (pa.types.is_integer, lambda raw, _: int(raw)),
    (pa.types.is_boolean, lambda raw, _: raw.lower() == "true"),
    (pa.types.is_floating, lambda raw, _: float(raw)),
    (pa.types.is_decimal, lambda raw, _: Decimal(raw)),
    (pa.types.is_date, lambda raw, _: dt.date.fromisoformat(raw)),
    (pa.types.is_timestamp, _parse_timestamp),
    (pa.types.is_binary, lambda raw, _: raw.encode("latin-1")),
)


def _parse_partition_value(raw: Any, kind: pa.DataType) -> Any:
    """A partition value as the log spells it (a string; None for null) turned into ``kind``'s Python value.

    Snapshot entries carry typed values already (delta-rs parsed them); those pass through.
    """
    if not isinstance(raw, str):
        return raw
    for matches, parse in _PARTITION_PARSERS:
        if matches(kind):
            return parse(raw, kind)
    return raw


def _constant(value: Any, kind: pa.DataType, rows: int) -> pa.Array:
    if value is None:
        return _nulls(rows, kind)
    scalar: Any = pa.scalar(value, type=kind)  # the stubs type repeat() per scalar class
    return pa.repeat(scalar, rows)


def _nulls(rows: int, kind: pa.DataType) -> pa.Array:
    any_kind: Any = kind  # the stubs type nulls() per data type class
    return pa.nulls(rows, any_kind)


class FileReader:
    """Turns a batch's files into Arrow record batches of exactly the stream's schema (on an executor)."""

    def __init__(self, table_uri: str, storage_options: Mapping[str, str], schema: pa.Schema) -> None:
        self.table_uri = table_uri
        self.schema = schema
        self._fs, self._root = filesystem_for(table_uri, storage_options)
        metadata = set(METADATA_COLUMNS)
        self._data_columns = [f.name for f in schema if f.name not in metadata]

    def read(self, entries: Sequence[FileEntry], *, change_feed: bool) -> Iterator[pa.RecordBatch]:
        for entry in entries:
            yield from self._read_file(entry, change_feed=change_feed)

    def _open(self, entry: FileEntry) -> pq.ParquetFile:
        path = join(self._root, entry.path)
        try:
            return pq.ParquetFile(self._fs.open_input_file(path))
        except (FileNotFoundError, OSError) as error:
            if not _is_not_found(error):
                raise
            raise MissingDataFileError(
                f"Delta table {self.table_uri} version {entry.version} names data file {entry.path}, which "
                "storage no longer has: it was vacuumed (or deleted) before this query read it, and its rows "
                "cannot be read. Restart from a new checkpoint, or with starting_version at a version whose "
                "files are kept; keep vacuum's retention longer than a query may fall behind."
            ) from error

    def _read_file(self, entry: FileEntry, *, change_feed: bool) -> Iterator[pa.RecordBatch]:
        parquet = self._open(entry)
        present = set(parquet.schema_arrow.names)
        partitions = dict(entry.partition_values)
        wanted = [c for c in self._data_columns if c in present and c not in partitions]
        if change_feed and entry.action == "cdc" and CHANGE_TYPE in present:
            wanted.append(CHANGE_TYPE)
        batches = parquet.iter_batches(batch_size=_BATCH_ROWS, columns=wanted) if wanted else None
        if batches is None:
            # No stored column is wanted (e.g. only partition columns): the row count comes from the footer.
            yield self._assemble(entry, None, parquet.metadata.num_rows, partitions)
            return
        for batch in batches:
            yield self._assemble(entry, batch, batch.num_rows, partitions)

    def _assemble(
        self, entry: FileEntry, batch: pa.RecordBatch | None, rows: int, partitions: Mapping[str, Any]
    ) -> pa.RecordBatch:
        names = set(batch.schema.names) if batch is not None else set()
        columns: list[pa.Array] = []
        for target in self.schema:
            name, kind = target.name, target.type
            if name in partitions:
                columns.append(_constant(_parse_partition_value(partitions[name], kind), kind, rows))
            elif name == COMMIT_VERSION:
                columns.append(_constant(entry.version, kind, rows))
            elif name == COMMIT_TIMESTAMP:
                moment = dt.datetime.fromtimestamp(entry.timestamp_ms / 1000, tz=dt.UTC)
                columns.append(_constant(moment, kind, rows))
            elif name == CHANGE_TYPE and name not in names:
                columns.append(_constant("delete" if entry.action == "remove" else "insert", kind, rows))
            elif batch is not None and name in names:
                columns.append(batch.column(name).cast(kind))
            else:
                # A column the file predates (added to the table later): null, as Delta reads it.
                columns.append(_nulls(rows, kind))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
