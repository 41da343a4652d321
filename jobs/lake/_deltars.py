"""The delta-rs engine: the one Delta code path that runs everywhere (laptop, EMR, Synapse)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from jobs.lake._arrow import (
    apply_filters,
    check_filters,
    check_schema,
    filter_expression,
    merge_source,
    normalize_timestamps,
)
from jobs.lake._commit_log import commit_infos, commit_metadata, commit_record
from jobs.lake._sql import quote_identifier
from jobs.lake.engine import (
    DEFAULT_RETENTION_HOURS,
    AppendResult,
    CommitRecord,
    CompactResult,
    DeleteResult,
    FileStats,
    Filter,
    MergeResult,
    SchemaMode,
    TableHandles,
    TableProtocol,
    TableRef,
)
from jobs.lake.errors import LakeError, LakeTableNotFoundError

_T = TypeVar("_T")
# A table as the engine keeps it: its URI and its storage options.
_Key = tuple[str, tuple[tuple[str, str], ...]]


def _key(table_uri: str, options: dict[str, str]) -> _Key:
    return (table_uri, tuple(sorted(options.items())))


@dataclass(frozen=True)
class _Write:
    """One append's options, as ``DeltaRsEngine.append`` received them."""

    options: dict[str, str]
    app_id: str
    batch_id: int
    partition_by: Sequence[str] | None
    schema_mode: SchemaMode
    target_file_size: int | None


class DeltaRsEngine(TableHandles):
    """Delta tables through delta-rs (the ``deltalake`` package). The default engine.

    An engine keeps one open table per URI for its appends and transaction lookups, brought up to date
    with ``update_incremental()`` before each use: opening a table replays its log from the last checkpoint,
    which a streaming sink committing every second pays twice a batch, growing with every commit until the
    next checkpoint (measured on the emulator's S3: 0.1 s after a checkpoint, 1.3 s 80 commits later;
    catching up one commit: 0.03 s). Other operations open the table afresh, as before.

    What that handle may meet: commits by other writers or processes are read by the catch-up (it lists the
    log past the handle's version), so a transaction another writer recorded is seen; vacuum removes only
    files no current version lists, which an append never reads; a table deleted (or recreated with fewer
    commits than the handle has read) under the handle makes its next use fail, as delta-rs finds the log it
    read gone, and that is reported as a :class:`LakeError` rather than silently starting a new table the
    checkpoint knows nothing of (a table recreated at or past that version is not told apart, as with any
    reader holding a version: its transactions included, so do not recreate a table under a running job); old log files cleaned up under it do not matter to the catch-up, which reads only
    newer ones, and should delta-rs miss one anyway the engine opens the table afresh. A handle
    whose use raised, or whose catch-up failed, is dropped and the next use opens the table afresh. Memory:
    one table state (its file list) per URI an engine has appended to.

    Transaction lookups: delta-rs 1.x answers ``transaction_version`` by reading every commit file since the
    last log checkpoint (on S3 one GET each: ~30 GETs at version 30, up to ~100), and the sink asks twice a
    batch (before moving the batch into Arrow, and again inside the append). The engine remembers, per kept
    handle, the answer at the version it was read, and the batch of its own commits: a commit the handle
    moved to directly (exactly one version on) is the engine's own, so the application's latest transaction
    at that version is the batch it carried. A lookup at a version the engine has an answer for uses it;
    when the catch-up moved the handle past it (another writer committed), delta-rs is asked again. A handle
    opened afresh starts with nothing remembered, and what was remembered is dropped with its handle.
    """

    name = "delta-rs"
    accepts_frames = False  # batches come as Arrow tables (the driver-side path)

    def __init__(self) -> None:
        self._handles: dict[_Key, DeltaTable] = {}
        self._handle_locks: dict[_Key, threading.Lock] = {}
        # Per table, for the handle kept (that very object): app id -> (table version, the app's transaction
        # version at it). Read and written under the table's lock (``_latest``).
        self._transactions: dict[_Key, tuple[DeltaTable, dict[str, tuple[int, int | None]]]] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def _latest(self, table_uri: str, options: dict[str, str]) -> Iterator[DeltaTable | None]:
        """The engine's open table at ``table_uri``, at its latest version (None when there is no table).

        One user at a time per table; a handle whose use raised is dropped (it may be part-way through a
        commit), so the next use opens the table afresh.
        """
        key = _key(table_uri, options)
        with self._guard:
            lock = self._handle_locks.setdefault(key, threading.Lock())
        with lock:
            table = self._handles.pop(key, None)
            if table is not None:
                try:
                    table.update_incremental()
                except (DeltaError, OSError):
                    table = None  # e.g. log files cleaned up past the handle's version: replay from scratch
                    self._transactions.pop(key, None)  # what was remembered goes with the handle
            if table is None:
                table = _open(table_uri, options)
            try:
                yield table
            except BaseException:
                self._transactions.pop(key, None)
                raise
            # Put back only when its use returned: one whose use raised may be part-way through a commit.
            if table is not None:
                self._handles[key] = table

    def _use_latest(
        self, table_uri: str, options: dict[str, str], use: Callable[[DeltaTable | None], _T]
    ) -> _T:
        """``use(table)`` on the engine's open table at ``table_uri`` (None when there is none).

        When the kept handle finds log files it had read gone, ``use`` runs once more on a table opened
        afresh, unless the table was deleted or replaced meanwhile (then a :class:`LakeError`).
        """
        for fresh in (False, True):
            seen: int | None = None
            try:
                with self._latest(table_uri, options) as table:
                    seen = None if table is None else table.version()
                    return use(table)
            except DeltaError as error:
                if fresh or seen is None or not _log_gone(error):
                    raise
                _check_still_there(table_uri, options, seen, error)  # else: its old log was cleaned up
        raise AssertionError("unreachable: the second attempt returns or raises")

    def __repr__(self) -> str:
        return "DeltaRsEngine()"

    # -- appends ---------------------------------------------------------------------------------------

    def append(
        self,
        ref: TableRef,
        data: pa.Table,
        *,
        app_id: str,
        batch_id: int,
        partition_by: Sequence[str] | None = None,
        schema_mode: SchemaMode = "strict",
        target_file_size: int | None = None,
    ) -> AppendResult:
        """Append ``data`` in ONE commit carrying the transaction ``(app_id, batch_id)``.

        delta-rs records a transaction id without rejecting a repeated one, so the table's last
        transaction version for ``app_id`` is read first and a batch at or below it is skipped.
        An empty ``data`` still commits (no files, the transaction only) so progress is recorded.

        Raises:
            TableSchemaError: the data's columns or types differ from the table's (strict mode), or a
                column's type differs (merge mode).
            LakeError: ``partition_by`` differs from the existing table's partitioning.
        """
        table_uri, options = ref.uri, dict(ref.storage_options)
        if schema_mode not in ("strict", "merge"):
            raise LakeError(
                f"expected schema_mode 'strict' or 'merge', found {schema_mode!r} for {table_uri}."
            )
        batch = normalize_timestamps(data)
        write = _Write(options, app_id, batch_id, partition_by, schema_mode, target_file_size)
        return self._use_latest(
            table_uri, options, lambda table: self._append_to(table, table_uri, batch, write)
        )

    def _append_to(
        self, table: DeltaTable | None, table_uri: str, batch: pa.Table, write: _Write
    ) -> AppendResult:
        before: int | None = None
        if table is not None:
            done = self._transaction_of(_key(table_uri, write.options), table, write.app_id)
            if done is not None and done >= write.batch_id:
                return AppendResult(committed=False, table_version=table.version(), rows=0)
            check_schema(table_uri, table.schema(), batch.schema, write.schema_mode)
            _check_partitioning(table_uri, table, write.partition_by)
            before = table.version()
        write_deltalake(
            table if table is not None else table_uri,
            batch,
            mode="append",
            partition_by=list(write.partition_by) if write.partition_by else None,
            schema_mode="merge" if write.schema_mode == "merge" else None,
            storage_options=write.options or None,
            target_file_size=write.target_file_size,
            commit_properties=_commit_properties(write.app_id, write.batch_id),
        )
        # write_deltalake moves a DeltaTable it was given to the version it committed; no history() read
        # (history() holds the GIL during I/O, which stalls an in-process emulator such as moto's).
        written = table if table is not None else _require(table_uri, write.options)
        if before is not None and written.version() == before + 1:
            # Exactly one commit since the version the handle was at, and the handle holds this write: that
            # commit is this one, so at it the app's latest transaction is this batch.
            self._remember(
                _key(table_uri, write.options), written, write.app_id, written.version(), write.batch_id
            )
        return AppendResult(committed=True, table_version=written.version(), rows=batch.num_rows)

    def _transaction_of(self, key: _Key, table: DeltaTable, app_id: str) -> int | None:
        """``table.transaction_version(app_id)``, remembered for this handle at its current version."""
        version = table.version()
        kept = self._transactions.get(key)
        if kept is not None and kept[0] is table:
            known = kept[1].get(app_id)
            if known is not None and known[0] == version:
                return known[1]
        done = table.transaction_version(app_id)
        self._remember(key, table, app_id, version, done)
        return done

    def _remember(self, key: _Key, table: DeltaTable, app_id: str, version: int, done: int | None) -> None:
        kept = self._transactions.get(key)
        if kept is None or kept[0] is not table:
            kept = (table, {})  # another handle than the one remembered for: start afresh
            self._transactions[key] = kept
        kept[1][app_id] = (version, done)

    def transaction_version(self, ref: TableRef, app_id: str) -> int | None:
        """Return the last batch id committed for ``app_id``, or None (also when there is no table)."""
        table_uri, options = ref.uri, dict(ref.storage_options)
        key = _key(table_uri, options)
        return self._use_latest(
            table_uri,
            options,
            lambda table: None if table is None else self._transaction_of(key, table, app_id),
        )

    def version(self, ref: TableRef) -> int | None:
        """Return the table's latest version, or None when there is no table at the URI."""
        table_uri, options = ref.uri, dict(ref.storage_options)
        table = _open(table_uri, options)
        return None if table is None else table.version()

    def commits(self, ref: TableRef) -> list[CommitRecord]:
        """Return the table's commit history, oldest first, with the (app_id, batch_id) each recorded."""
        table_uri, options = ref.uri, dict(ref.storage_options)
        infos = commit_infos(table_uri, options)
        if infos is None:
            infos = _require(table_uri, options).history()
        elif not infos:
            _require(table_uri, options)
        records = [
            commit_record(
                int(info["version"]),
                datetime.fromtimestamp(int(info["timestamp"]) / 1000, tz=UTC),
                str(info.get("operation", "")),
                info,
            )
            for info in infos
        ]
        return sorted(records, key=lambda record: record.version)

    # -- table management ------------------------------------------------------------------------------

    def create_table(
        self,
        ref: TableRef,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] | None = None,
        change_data_feed: bool = False,
    ) -> int:
        """Create the table if there is none at the URI; return its version.

        Change data feed on means writer protocol 4 (still readable by Delta 3.2 and Athena); no other
        table features are turned on, deletion vectors in particular.
        """
        table_uri, options = ref.uri, dict(ref.storage_options)
        existing = _open(table_uri, options)
        if existing is not None:
            return existing.version()
        configuration = {"delta.enableChangeDataFeed": "true"} if change_data_feed else None
        table = DeltaTable.create(
            table_uri,
            normalize_timestamps(schema.empty_table()).schema,
            mode="ignore",
            partition_by=list(partition_by) if partition_by else None,
            configuration=configuration,
            storage_options=options or None,
        )
        return table.version()

    def protocol(self, ref: TableRef) -> TableProtocol:
        """Return the table's reader/writer protocol versions and features."""
        table_uri, options = ref.uri, dict(ref.storage_options)
        proto = _require(table_uri, options).protocol()
        return TableProtocol(
            min_reader_version=proto.min_reader_version,
            min_writer_version=proto.min_writer_version,
            reader_features=tuple(proto.reader_features or ()),
            writer_features=tuple(proto.writer_features or ()),
        )

    # -- MERGE -----------------------------------------------------------------------------------------

    def merge(
        self,
        ref: TableRef,
        data: pa.Table,
        *,
        keys: Sequence[str],
        precombine: str,
        delete_column: str | None = None,
        app_id: str | None = None,
        batch_id: int | None = None,
        partition_by: Sequence[str] | None = None,
    ) -> MergeResult:
        """Upsert ``data`` into the table by ``keys``; the row with the latest ``precombine`` value wins.

        Inside the batch, one row per key survives (highest ``precombine``, the last one among equals, so
        duplicates and out-of-order rows resolve the same way on every replay). Against the table, a row
        applies only when its ``precombine`` is at least the stored one, so a late, older change never
        overwrites a newer one. A row whose ``delete_column`` is true deletes the key (same ordering rule).
        The delete column is not stored. Deleted keys keep no tombstone: an older insert arriving after the
        delete brings the key back. With ``app_id``/``batch_id`` the merge is idempotent like ``append``.
        The table is created from the batch's columns (partitioned by ``partition_by``) when there is none.

        Raises:
            LakeError: a key, precombine or delete column is not in the data, or only one of
                ``app_id``/``batch_id`` was given.
            TableSchemaError: the data's columns differ from the table's.
        """
        table_uri, options = ref.uri, dict(ref.storage_options)
        wanted = [*keys, precombine] + ([delete_column] if delete_column else [])
        absent = [c for c in wanted if c not in data.column_names]
        if absent or not keys:
            raise LakeError(
                f"expected key, precombine and delete columns {wanted} in the MERGE source for {table_uri}, "
                f"missing {absent or 'keys'}; the batch has {data.column_names}."
            )
        if (app_id is None) != (batch_id is None):
            raise LakeError(f"merge into {table_uri}: give both app_id and batch_id, or neither.")
        source, columns = merge_source(data, keys, precombine, delete_column)

        table = _open(table_uri, options)
        if table is None:
            self.create_table(ref, source.select(columns).schema, partition_by=partition_by)
            table = _require(table_uri, options)
        elif app_id is not None and batch_id is not None:
            done = table.transaction_version(app_id)
            if done is not None and done >= batch_id:
                return MergeResult(committed=False, table_version=table.version(), source_rows=data.num_rows)
        check_schema(table_uri, table.schema(), source.select(columns).schema, "strict")

        def col(alias: str, name: str) -> str:
            return f"{alias}.{_quote(name)}"

        on = " AND ".join(f"{col('t', k)} = {col('s', k)}" for k in keys)
        newer = f"{col('s', precombine)} >= {col('t', precombine)}"
        updates = {_quote(c): col("s", c) for c in columns}
        props = _commit_properties(app_id, batch_id) if app_id is not None and batch_id is not None else None
        merger = table.merge(
            source, predicate=on, source_alias="s", target_alias="t", commit_properties=props
        )
        if delete_column:
            flag = col("s", delete_column)
            merger = (
                merger.when_matched_delete(predicate=f"{newer} AND {flag}")
                .when_matched_update(updates=updates, predicate=f"{newer} AND NOT {flag}")
                .when_not_matched_insert(updates=updates, predicate=f"NOT {flag}")
            )
        else:
            merger = merger.when_matched_update(updates=updates, predicate=newer).when_not_matched_insert(
                updates=updates
            )
        before = table.version()
        metrics = merger.execute()
        after = _require(table_uri, options)
        if after.version() == before and props is not None:
            # delta-rs skips the commit of a MERGE that changes no row, and with it the transaction; record
            # the transaction in an empty commit so a replay of this batch is still recognised.
            write_deltalake(after, source.select(columns).slice(0, 0), mode="append", commit_properties=props)
        return MergeResult(
            committed=True,
            table_version=after.version(),
            source_rows=data.num_rows,
            inserted=int(metrics.get("num_target_rows_inserted", 0)),
            updated=int(metrics.get("num_target_rows_updated", 0)),
            deleted=int(metrics.get("num_target_rows_deleted", 0)),
        )

    def delete(
        self,
        ref: TableRef,
        predicate: str,
        *,
        app_id: str | None = None,
        batch_id: int | None = None,
    ) -> DeleteResult:
        """Delete the rows matching ``predicate`` (DataFusion SQL) in one commit.

        Only files holding matching rows are rewritten (file statistics skip the rest). A predicate that
        matches nothing makes no commit.

        Raises:
            LakeError: only one of ``app_id``/``batch_id`` was given, or the predicate does not parse.
        """
        table_uri, options = ref.uri, dict(ref.storage_options)
        if (app_id is None) != (batch_id is None):
            raise LakeError(f"delete from {table_uri}: give both app_id and batch_id, or neither.")
        table = _require(table_uri, options)
        if app_id is not None and batch_id is not None:
            done = table.transaction_version(app_id)
            if done is not None and done >= batch_id:
                return DeleteResult(committed=False, table_version=table.version())
        props = _commit_properties(app_id, batch_id) if app_id is not None and batch_id is not None else None
        before = table.version()
        try:
            metrics = table.delete(predicate, commit_properties=props)
        except DeltaError as error:
            if isinstance(error, CommitFailedError):
                raise  # a lost commit race: the caller's retry policy handles it
            raise LakeError(
                f"delete from {table_uri}: the predicate {predicate!r} was rejected "
                f"({str(error).splitlines()[0]}); expected a SQL "
                "condition over the table's columns, e.g. \"order_ts < '2026-01-01T00:00:00Z'\"."
            ) from error
        deleted = int(metrics.get("num_deleted_rows", 0))
        return DeleteResult(
            committed=table.version() != before, table_version=table.version(), deleted=deleted
        )

    # -- maintenance -----------------------------------------------------------------------------------

    def checkpoint(self, ref: TableRef) -> int:
        """Write a Parquet checkpoint of the log at the latest version; return that version."""
        table = _require(ref.uri, dict(ref.storage_options))
        table.create_checkpoint()
        return table.version()

    def file_stats(self, ref: TableRef) -> FileStats:
        """Count and size the data files the latest version references (from the log; no listing)."""
        table = _require(ref.uri, dict(ref.storage_options))
        sizes = pa.table(table.get_add_actions()).column("size_bytes")
        return FileStats(version=table.version(), files=len(sizes), bytes=int(pc.sum(sizes).as_py() or 0))

    def compact(
        self,
        ref: TableRef,
        *,
        z_order_by: Sequence[str] | None = None,
        target_file_size: int | None = None,
    ) -> CompactResult:
        """Bin-pack small files (or Z-order by ``z_order_by``); rows are unchanged, only files move."""
        table_uri, options = ref.uri, dict(ref.storage_options)
        table = _require(table_uri, options)
        if z_order_by:
            metrics = table.optimize.z_order(list(z_order_by), target_size=target_file_size)
        else:
            metrics = table.optimize.compact(target_size=target_file_size)
        return CompactResult(
            files_removed=int(metrics.get("numFilesRemoved", 0)),
            files_added=int(metrics.get("numFilesAdded", 0)),
            # optimize moves ``table`` to the version it committed (update_incremental), no reopen needed.
            table_version=table.version(),
        )

    def vacuum(
        self,
        ref: TableRef,
        *,
        retention_hours: int = DEFAULT_RETENTION_HOURS,
        full: bool = False,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete unreferenced files older than ``retention_hours``; return their paths.

        A retention below the 7-day default is honoured because passing it is the explicit choice.
        ``full=True`` also removes files no commit ever referenced (left by aborted tasks).
        """
        table_uri, options = ref.uri, dict(ref.storage_options)
        if retention_hours < 0:
            raise LakeError(
                f"expected retention_hours >= 0 for vacuum of {table_uri}, found {retention_hours}."
            )
        table = _require(table_uri, options)
        return table.vacuum(
            retention_hours=retention_hours,
            dry_run=dry_run,
            enforce_retention_duration=retention_hours >= DEFAULT_RETENTION_HOURS,
            full=full,
        )

    # -- reads -----------------------------------------------------------------------------------------

    def read(
        self,
        ref: TableRef,
        *,
        version: int | None = None,
        timestamp: datetime | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
    ) -> pa.Table:
        """Read the table now, at ``version``, or as it was at ``timestamp`` (latest commit at or before it).

        ``filters`` go to delta-rs, which skips files by partition values and statistics. pyarrow cannot
        compare ``string_view`` columns (what delta-rs' MERGE writes), so when the pushed-down filter fails
        on such a file the rows are read and filtered after the read instead: the same rows, more I/O.

        Raises:
            LakeError: both ``version`` and ``timestamp`` were given, the timestamp is naive, or a filter
                is malformed.
        """
        table_uri, options = ref.uri, dict(ref.storage_options)
        if version is not None and timestamp is not None:
            raise LakeError(f"read of {table_uri}: give version or timestamp, not both.")
        wanted = list(filters or ())
        check_filters(table_uri, wanted)
        table = _require(table_uri, options)
        if version is not None:
            table.load_as_version(version)
        elif timestamp is not None:
            if timestamp.tzinfo is None:
                raise LakeError(
                    f"read of {table_uri}: expected a time-zone-aware timestamp, found naive {timestamp}; "
                    "pass e.g. datetime(..., tzinfo=UTC)."
                )
            table.load_as_version(_version_at(table_uri, self.commits(ref), timestamp))
        selected = list(columns) if columns else None
        # Through the dataset: to_pyarrow_table() on an abfss:// table can abort the interpreter at exit
        # (delta-rs 1.6 with pyarrow's I/O threads; seen against Azurite).
        dataset = table.to_pyarrow_dataset()
        if not wanted:
            return dataset.to_table(columns=selected)
        try:
            return dataset.to_table(columns=selected, filter=filter_expression(wanted))
        except pa.ArrowNotImplementedError:
            names = None if selected is None else sorted({*selected, *(name for name, _, _ in wanted)})
            rows = apply_filters(dataset.to_table(columns=names), wanted)
            return rows if selected is None else rows.select(selected)

    def read_changes(
        self,
        ref: TableRef,
        *,
        starting_version: int = 0,
        ending_version: int | None = None,
    ) -> pa.Table:
        """Read the change data feed (``_change_type``, ``_commit_version``, ``_commit_timestamp`` added)."""
        table_uri, options = ref.uri, dict(ref.storage_options)
        table = _require(table_uri, options)
        if table.metadata().configuration.get("delta.enableChangeDataFeed") != "true":
            raise LakeError(
                f"expected change data feed on for {table_uri}, found it off; create the table with "
                "create_table(..., change_data_feed=True)."
            )
        reader = table.load_cdf(starting_version=starting_version, ending_version=ending_version)
        return pa.RecordBatchReader.from_stream(reader).read_all()


def _version_at(table_uri: str, commits: Sequence[CommitRecord], timestamp: datetime) -> int:
    """The latest version committed at or before ``timestamp``, on the times :meth:`commits` reports.

    delta-rs itself resolves a timestamp on the log files' modification times, which come some milliseconds
    after the commit's own time: a read as of a commit's reported time then missed that commit.
    """
    if not commits:
        raise LakeError(
            f"read of {table_uri} as of {timestamp.isoformat()}: expected commits in the table's log, found none "
            "(only a checkpoint); read by version."
        )
    earlier = [commit.version for commit in commits if commit.timestamp <= timestamp]
    if not earlier:
        first = commits[0]  # commits() lists them oldest first
        raise LakeError(
            f"read of {table_uri} as of {timestamp.isoformat()}: expected a commit at or before that time, "
            f"found the earliest kept at {first.timestamp.isoformat()} (version {first.version}); "
            "read as of a later time, or by version."
        )
    return max(earlier)


def _open(table_uri: str, options: dict[str, str]) -> DeltaTable | None:
    try:
        return DeltaTable(table_uri, storage_options=options or None)
    except TableNotFoundError:
        return None


def _log_gone(error: DeltaError) -> bool:
    """True when a kept handle found log files it had read missing (table deleted, replaced or log cleaned)."""
    message = str(error)
    return "Invalid table version" in message or "File not found" in message


def _check_still_there(table_uri: str, options: dict[str, str], seen: int, error: DeltaError) -> None:
    """Raise when the table a kept handle had read at version ``seen`` was deleted or replaced since.

    A table still at ``seen`` or later only had old log files cleaned up: the caller opens it afresh.
    """
    current = _open(table_uri, options)
    if current is None or current.version() < seen:
        found = "no table" if current is None else f"a table at version {current.version()}"
        raise LakeError(
            f"expected the Delta table at {table_uri} to still hold version {seen}, the latest this writer read; "
            f"found {found}: the table was deleted or replaced while the job ran. Restore the table, or start "
            "the job on a new table with a new checkpoint."
        ) from error


def _require(table_uri: str, options: dict[str, str]) -> DeltaTable:
    table = _open(table_uri, options)
    if table is None:
        raise LakeTableNotFoundError.at(table_uri)
    return table


def _commit_properties(app_id: str, batch_id: int) -> CommitProperties:
    # The txn action makes the batch idempotent; the commitInfo keys let commits() map batch -> commit time.
    return CommitProperties(
        custom_metadata=commit_metadata(app_id, batch_id),
        app_transactions=[Transaction(app_id, batch_id)],
    )


def _check_partitioning(table_uri: str, table: DeltaTable, partition_by: Sequence[str] | None) -> None:
    existing = list(table.metadata().partition_columns)
    if partition_by is not None and list(partition_by) != existing:
        raise LakeError(
            f"expected partition columns {list(partition_by)} for {table_uri}, found the table partitioned by "
            f"{existing}; a table's partitioning is fixed when it is created. Use the table's partitioning."
        )


def _quote(name: str) -> str:
    return quote_identifier(name)
