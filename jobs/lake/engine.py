"""The one interface every lake engine implements, and the records it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast, runtime_checkable

import pyarrow as pa

from jobs.lake.errors import LakeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Commit-info keys that tie a Delta commit to the streaming query and micro-batch that made it.
APP_ID_KEY = "lakestack.appId"
BATCH_ID_KEY = "lakestack.batchId"

SchemaMode = Literal["strict", "merge"]

# One condition of a read filter: (column, operator, value); operators as in delta-rs / pyarrow's DNF filters.
FilterOp = Literal["=", "!=", "<", "<=", ">", ">=", "in", "not in"]
Filter = tuple[str, FilterOp, Any]

# Seven days: the Delta default below which a vacuum can break concurrent readers and time travel.
DEFAULT_RETENTION_HOURS = 168


@dataclass(frozen=True)
class AppendResult:
    """Outcome of one idempotent append.

    Attributes:
        committed: True when this call made a commit; False when the batch was already in the table.
        table_version: the table version after the call (the new commit, or the current one when skipped).
        rows: rows written by this call (0 when skipped).
    """

    committed: bool
    table_version: int
    rows: int = 0


@dataclass(frozen=True)
class CommitRecord:
    """One entry of a table's commit history.

    Attributes:
        version: table version made by the commit.
        timestamp: commit time, UTC.
        operation: Delta operation name (``WRITE``, ``MERGE``, ``OPTIMIZE``, ...).
        app_id: streaming query identity recorded with the commit, if any.
        batch_id: micro-batch id recorded with the commit, if any.
        files_added: data files the commit added (None when the engine cannot tell).
        files_removed: data files the commit removed (None when the engine cannot tell).
        bytes_added: bytes of the data files the commit added (None when the engine cannot tell).
    """

    version: int
    timestamp: datetime
    operation: str
    app_id: str | None = None
    batch_id: int | None = None
    files_added: int | None = None
    files_removed: int | None = None
    bytes_added: int | None = None


@dataclass(frozen=True)
class MergeResult:
    """Outcome of an upsert.

    Attributes:
        committed: False when the (app_id, batch_id) was already merged and the call did nothing.
        table_version: the table version after the call.
        source_rows: rows in the batch before de-duplication by key.
        inserted: rows inserted; updated: rows updated; deleted: rows deleted.
    """

    committed: bool
    table_version: int
    source_rows: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class DeleteResult:
    """Outcome of a delete by predicate.

    Attributes:
        committed: False when nothing matched (no commit) or the (app_id, batch_id) was already there.
        table_version: the table version after the call.
        deleted: rows deleted.
    """

    committed: bool
    table_version: int
    deleted: int = 0


@dataclass(frozen=True)
class FileStats:
    """The data files a table version references.

    Attributes:
        version: the table version described.
        files: number of data files; bytes: their total size.
    """

    version: int
    files: int
    bytes: int


@dataclass(frozen=True)
class CompactResult:
    """Outcome of a compaction or Z-order.

    Attributes:
        files_removed: data files rewritten away; files_added: data files written.
        table_version: the table version after the call.
    """

    files_removed: int
    files_added: int
    table_version: int


@dataclass(frozen=True)
class TableProtocol:
    """Reader/writer protocol of a table, and its table features when it uses any."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] = field(default_factory=tuple)
    writer_features: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class TableRef:
    """Where a table lives: its URI and the storage options (from ``storage_options_for``) to reach it."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class LakeEngine(Protocol):
    """What the pipelines need from a Delta engine: delta-spark (``JvmDeltaEngine``) in Spark jobs, delta-rs
    (``DeltaRsEngine``) where no Spark runs."""

    name: str
    # True when ``append`` takes a Spark DataFrame and writes it from the executors (delta-spark).
    accepts_frames: bool

    def table(self, uri: str, *, storage_options: Mapping[str, str] | None = None) -> LakeTable:
        """A handle on the Delta table at ``uri``: every table operation is a method of it."""
        ...

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
        """Append ``data`` in one commit carrying the transaction (app_id, batch_id), unless already there."""
        ...

    def transaction_version(self, ref: TableRef, app_id: str) -> int | None:
        """Return the last batch id committed for ``app_id``, or None (also when the table does not exist)."""
        ...

    def version(self, ref: TableRef) -> int | None:
        """Return the table's latest version, or None when there is no table at the URI."""
        ...

    def commits(self, ref: TableRef) -> list[CommitRecord]:
        """Return the table's commit history, oldest first."""
        ...

    def create_table(
        self,
        ref: TableRef,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] | None = None,
        change_data_feed: bool = False,
    ) -> int:
        """Create the table if it does not exist; return its version."""
        ...

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
        """Upsert ``data`` by ``keys``: the latest ``precombine`` value wins; flagged rows delete."""
        ...

    def delete(
        self,
        ref: TableRef,
        predicate: str,
        *,
        app_id: str | None = None,
        batch_id: int | None = None,
    ) -> DeleteResult:
        """Delete the rows matching the SQL ``predicate`` in one commit (idempotent with app_id/batch_id)."""
        ...

    def compact(
        self,
        ref: TableRef,
        *,
        z_order_by: Sequence[str] | None = None,
        target_file_size: int | None = None,
    ) -> CompactResult:
        """Rewrite small files into bigger ones (Z-ordered by ``z_order_by`` when given)."""
        ...

    def checkpoint(self, ref: TableRef) -> int:
        """Write a log checkpoint at the latest version; return that version."""
        ...

    def file_stats(self, ref: TableRef) -> FileStats:
        """Count and size the data files of the latest version."""
        ...

    def vacuum(
        self,
        ref: TableRef,
        *,
        retention_hours: int = DEFAULT_RETENTION_HOURS,
        full: bool = False,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete files no longer referenced and older than the retention; return them."""
        ...

    def read(
        self,
        ref: TableRef,
        *,
        version: int | None = None,
        timestamp: datetime | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
    ) -> pa.Table:
        """Read the table, now or as of a version or a timestamp (time travel), keeping rows that pass
        every filter (pushed down to skip files where the engine can)."""
        ...

    def read_changes(
        self,
        ref: TableRef,
        *,
        starting_version: int = 0,
        ending_version: int | None = None,
    ) -> pa.Table:
        """Read the change data feed between two versions (inclusive)."""
        ...

    def protocol(self, ref: TableRef) -> TableProtocol:
        """Return the table's reader/writer protocol."""
        ...


class TableHandles:
    """Gives an engine its :meth:`LakeEngine.table` (mixed into every engine)."""

    def table(self, uri: str, *, storage_options: Mapping[str, str] | None = None) -> LakeTable:
        # Options that renew a credential themselves (a Synapse token) are kept, not copied, so every
        # operation reads a live token; any other mapping is copied so the handle cannot change under us.
        kept = storage_options if getattr(storage_options, "renewing", False) else dict(storage_options or {})
        return LakeTable(cast("LakeEngine", self), TableRef(uri, cast("Mapping[str, str]", kept)))


class LakeTable:
    """One Delta table, bound once to an engine and its storage options, as delta-rs binds a ``DeltaTable``.

    Each call sees the table's latest version (time travel is asked for explicitly with :meth:`read`).
    Get one from ``engine.table(uri, storage_options=...)``.
    """

    def __init__(self, engine: LakeEngine, ref: TableRef) -> None:
        self.engine = engine
        self.ref = ref

    def __repr__(self) -> str:
        return f"LakeTable({self.ref.uri!r}, engine={self.engine.name!r})"

    @property
    def uri(self) -> str:
        return self.ref.uri

    def exists(self) -> bool:
        """True when there is a Delta table at the URI."""
        return self.engine.version(self.ref) is not None

    def version(self) -> int | None:
        """The latest version, or None when there is no table."""
        return self.engine.version(self.ref)

    def transaction_version(self, app_id: str) -> int | None:
        """The last batch id committed for ``app_id``, or None (also when there is no table)."""
        return self.engine.transaction_version(self.ref, app_id)

    def commits(self) -> list[CommitRecord]:
        """The commit history, oldest first."""
        return self.engine.commits(self.ref)

    def protocol(self) -> TableProtocol:
        """The reader/writer protocol."""
        return self.engine.protocol(self.ref)

    def create(
        self, schema: pa.Schema, *, partition_by: Sequence[str] | None = None, change_data_feed: bool = False
    ) -> int:
        """Create the table if there is none; return its version."""
        return self.engine.create_table(
            self.ref, schema, partition_by=partition_by, change_data_feed=change_data_feed
        )

    def append(
        self,
        data: pa.Table | DataFrame,
        *,
        app_id: str,
        batch_id: int,
        partition_by: Sequence[str] | None = None,
        schema_mode: SchemaMode = "strict",
        target_file_size: int | None = None,
    ) -> AppendResult:
        """Append in one commit carrying the transaction (app_id, batch_id), unless already there.

        A DataFrame is for an engine with ``accepts_frames`` (delta-spark): its executors write it.
        """
        if not isinstance(data, pa.Table) and not self.engine.accepts_frames:
            raise LakeError(
                f"the {self.engine.name} engine appends Arrow tables, not DataFrames ({self.uri})."
            )
        return self.engine.append(
            self.ref,
            cast("pa.Table", data),  # a DataFrame only reaches an engine that takes one (checked above)
            app_id=app_id,
            batch_id=batch_id,
            partition_by=partition_by,
            schema_mode=schema_mode,
            target_file_size=target_file_size,
        )

    def merge(
        self,
        data: pa.Table,
        *,
        keys: Sequence[str],
        precombine: str,
        delete_column: str | None = None,
        app_id: str | None = None,
        batch_id: int | None = None,
        partition_by: Sequence[str] | None = None,
    ) -> MergeResult:
        """Upsert by ``keys``: the latest ``precombine`` value wins; rows flagged by ``delete_column`` delete."""
        return self.engine.merge(
            self.ref,
            data,
            keys=keys,
            precombine=precombine,
            delete_column=delete_column,
            app_id=app_id,
            batch_id=batch_id,
            partition_by=partition_by,
        )

    def delete(
        self, predicate: str, *, app_id: str | None = None, batch_id: int | None = None
    ) -> DeleteResult:
        """Delete the rows matching the SQL ``predicate`` (e.g. ``"order_ts < '2026-01-01'"``) in one commit.

        With ``app_id``/``batch_id`` the delete is idempotent like ``append``. A predicate that matches
        nothing makes no commit (and so records no transaction).
        """
        return self.engine.delete(self.ref, predicate, app_id=app_id, batch_id=batch_id)

    def checkpoint(self) -> int:
        """Write a log checkpoint at the latest version, so readers replay fewer JSON commits; return it."""
        return self.engine.checkpoint(self.ref)

    def file_stats(self) -> FileStats:
        """Count and size the data files of the latest version."""
        return self.engine.file_stats(self.ref)

    def compact(
        self, *, z_order_by: Sequence[str] | None = None, target_file_size: int | None = None
    ) -> CompactResult:
        """Rewrite small files into bigger ones (Z-ordered by ``z_order_by`` when given)."""
        return self.engine.compact(self.ref, z_order_by=z_order_by, target_file_size=target_file_size)

    def vacuum(
        self, *, retention_hours: int = DEFAULT_RETENTION_HOURS, full: bool = False, dry_run: bool = False
    ) -> list[str]:
        """Delete files no longer referenced and older than the retention; return them."""
        return self.engine.vacuum(self.ref, retention_hours=retention_hours, full=full, dry_run=dry_run)

    def read(
        self,
        *,
        version: int | None = None,
        timestamp: datetime | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
    ) -> pa.Table:
        """Read the table, now or as of a version or a timestamp (time travel).

        Args:
            version: a table version; timestamp: a time-zone-aware instant (give one or neither).
            columns: the columns to read (default: all).
            filters: ``(column, op, value)`` conditions, all of which a row must pass, e.g.
                ``[("log_seq", ">", 41)]``; op is one of ``= != < <= > >= in``, ``not in``. Files whose
                statistics rule a condition out are not read.
        """
        return self.engine.read(
            self.ref, version=version, timestamp=timestamp, columns=columns, filters=filters
        )

    def read_changes(self, *, starting_version: int = 0, ending_version: int | None = None) -> pa.Table:
        """The change data feed between two versions (inclusive)."""
        return self.engine.read_changes(
            self.ref, starting_version=starting_version, ending_version=ending_version
        )
