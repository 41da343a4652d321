"""The one interface every lake engine implements, and the records it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

import pyarrow as pa

# Commit-info keys that tie a Delta commit to the streaming query and micro-batch that made it.
APP_ID_KEY = "lakestack.appId"
BATCH_ID_KEY = "lakestack.batchId"

SchemaMode = Literal["strict", "merge"]

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
    """

    version: int
    timestamp: datetime
    operation: str
    app_id: str | None = None
    batch_id: int | None = None


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


@runtime_checkable
class LakeEngine(Protocol):
    """What the pipelines need from a Delta engine. ``DeltaRsEngine`` is the default everywhere."""

    name: str

    def append(
        self,
        table_uri: str,
        data: pa.Table,
        *,
        app_id: str,
        batch_id: int,
        partition_by: Sequence[str] | None = None,
        schema_mode: SchemaMode = "strict",
        target_file_size: int | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> AppendResult:
        """Append ``data`` in one commit carrying the transaction (app_id, batch_id), unless already there."""
        ...

    def transaction_version(
        self, table_uri: str, app_id: str, *, storage_options: Mapping[str, str] | None = None
    ) -> int | None:
        """Return the last batch id committed for ``app_id``, or None (also when the table does not exist)."""
        ...

    def version(self, table_uri: str, *, storage_options: Mapping[str, str] | None = None) -> int | None:
        """Return the table's latest version, or None when there is no table at the URI."""
        ...

    def commits(
        self, table_uri: str, *, storage_options: Mapping[str, str] | None = None
    ) -> list[CommitRecord]:
        """Return the table's commit history, oldest first."""
        ...

    def create_table(
        self,
        table_uri: str,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] | None = None,
        change_data_feed: bool = False,
        storage_options: Mapping[str, str] | None = None,
    ) -> int:
        """Create the table if it does not exist; return its version."""
        ...

    def merge(
        self,
        table_uri: str,
        data: pa.Table,
        *,
        keys: Sequence[str],
        precombine: str,
        delete_column: str | None = None,
        app_id: str | None = None,
        batch_id: int | None = None,
        partition_by: Sequence[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> MergeResult:
        """Upsert ``data`` by ``keys``: the latest ``precombine`` value wins; flagged rows delete."""
        ...

    def compact(
        self,
        table_uri: str,
        *,
        z_order_by: Sequence[str] | None = None,
        target_file_size: int | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> CompactResult:
        """Rewrite small files into bigger ones (Z-ordered by ``z_order_by`` when given)."""
        ...

    def vacuum(
        self,
        table_uri: str,
        *,
        retention_hours: int = DEFAULT_RETENTION_HOURS,
        full: bool = False,
        dry_run: bool = False,
        storage_options: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Delete files no longer referenced and older than the retention; return them."""
        ...

    def read(
        self,
        table_uri: str,
        *,
        version: int | None = None,
        timestamp: datetime | None = None,
        columns: Sequence[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> pa.Table:
        """Read the table, now or as of a version or a timestamp (time travel)."""
        ...

    def read_changes(
        self,
        table_uri: str,
        *,
        starting_version: int = 0,
        ending_version: int | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> pa.Table:
        """Read the change data feed between two versions (inclusive)."""
        ...

    def protocol(self, table_uri: str, *, storage_options: Mapping[str, str] | None = None) -> TableProtocol:
        """Return the table's reader/writer protocol."""
        ...
