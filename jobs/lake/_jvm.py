"""The JVM Delta engine (delta-spark), behind the same interface, used only where its classes load.

It is not covered by tests on machines without the Delta jars (no Maven here); the conformance suite runs
against it wherever ``JvmDeltaEngine.available()`` is true. Do not mix it with delta-rs writers on one S3
table: the JVM S3 log store does not commit with conditional puts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.lake._arrow import check_filters, check_schema, merge_source, normalize_timestamps, to_arrow
from jobs.lake._commit_log import commit_metadata, commit_record
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
from jobs.lake.errors import EngineUnavailableError, LakeError, LakeTableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_DELTA_CLASS = "io.delta.tables.DeltaTable"


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, and why not. Truthy when it can."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


class JvmDeltaEngine(TableHandles):
    """Delta tables through delta-spark in the active SparkSession (EMR Delta 4.0, Synapse Delta 3.2).

    Storage settings come from Spark's Hadoop configuration there; ``storage_options`` are ignored.
    """

    name = "jvm"

    def __init__(
        self, spark: SparkSession | None = None, *, load_class: Callable[[str], object] | None = None
    ) -> None:
        """``load_class(name)`` loads a JVM class or raises; the default asks the session's JVM."""
        self._spark = spark
        self._load_class = load_class

    def __repr__(self) -> str:
        return "JvmDeltaEngine()"

    def available(self) -> Availability:
        """Tell whether the delta-spark Python package and JVM classes load in the current SparkSession."""
        try:
            import delta.tables  # noqa: F401  # the Python half of delta-spark
        except ImportError as error:
            return Availability(False, f"the delta-spark Python package is not installed ({error})")
        spark = self._session_or_none()
        if spark is None:
            return Availability(False, "no active SparkSession to load the Delta classes in")
        load = self._load_class or (lambda name: spark._jvm.java.lang.Class.forName(name))  # type: ignore[union-attr]
        try:
            load(_DELTA_CLASS)
        except Exception as error:  # py4j wraps ClassNotFoundException in Py4JJavaError
            return Availability(
                False,
                f"JVM class {_DELTA_CLASS} does not load ({type(error).__name__}); start Spark with "
                "--packages io.delta:delta-spark_2.13:4.0.0 (or on EMR/Synapse, where Delta is built in)",
            )
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        if "DeltaSparkSessionExtension" not in extensions:
            return Availability(
                False, "spark.sql.extensions lacks io.delta.sql.DeltaSparkSessionExtension; set it at startup"
            )
        return Availability(True, "delta-spark classes load")

    # -- helpers ---------------------------------------------------------------------------------------

    def _session_or_none(self) -> SparkSession | None:
        if self._spark is not None:
            return self._spark
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()

    def _session(self) -> SparkSession:
        status = self.available()
        if not status:
            raise EngineUnavailableError(f"the jvm lake engine cannot run here: {status.reason}.")
        spark = self._session_or_none()
        assert spark is not None  # available() checked it
        return spark

    def _table(self, table_uri: str) -> Any:
        from delta.tables import DeltaTable

        spark = self._session()
        if not DeltaTable.isDeltaTable(spark, table_uri):
            raise LakeTableNotFoundError.at(table_uri)
        return DeltaTable.forPath(spark, table_uri)

    def _exists(self, table_uri: str) -> bool:
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self._session(), table_uri))

    def _frame(self, data: pa.Table) -> DataFrame:
        return self._session().createDataFrame(normalize_timestamps(data))

    # -- interface -------------------------------------------------------------------------------------

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
        """Append in one commit with Delta's own idempotent-write options (txnAppId / txnVersion)."""
        table_uri = ref.uri
        before = self.version(ref)
        if before is not None:
            done = self.transaction_version(ref, app_id)
            if done is not None and done >= batch_id:
                return AppendResult(committed=False, table_version=before, rows=0)
            self._check_schema(table_uri, data.schema, schema_mode)
        writer = (
            self._frame(data)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .option("userMetadata", _user_metadata(app_id, batch_id))
        )
        if schema_mode == "merge":
            writer = writer.option("mergeSchema", "true")
        if target_file_size is not None:
            writer = writer.option("delta.targetFileSize", str(target_file_size))
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(table_uri)
        after = self.version(ref)
        if after is None:
            raise LakeError(
                f"append to {table_uri} reported success but no Delta table is there; check the path."
            )
        # Delta's txnAppId/txnVersion skip a repeated batch silently: an unchanged version means skipped.
        committed = after != before
        return AppendResult(committed=committed, table_version=after, rows=data.num_rows if committed else 0)

    def _check_schema(self, table_uri: str, data: pa.Schema, mode: SchemaMode) -> None:
        existing = to_arrow(self._session().read.format("delta").load(table_uri).limit(0)).schema
        check_schema(table_uri, existing, normalize_timestamps(data.empty_table()).schema, mode)

    def transaction_version(self, ref: TableRef, app_id: str) -> int | None:
        """Return the last batch id committed for ``app_id`` (from the commits' user metadata), or None."""
        table_uri = ref.uri
        if not self._exists(table_uri):
            return None
        ids = [c.batch_id for c in self.commits(ref) if c.app_id == app_id and c.batch_id is not None]
        return max(ids) if ids else None

    def version(self, ref: TableRef) -> int | None:
        """Return the table's latest version, or None when there is no table at the URI."""
        table_uri = ref.uri
        if not self._exists(table_uri):
            return None
        return int(self._table(table_uri).history(1).collect()[0]["version"])

    def commits(self, ref: TableRef) -> list[CommitRecord]:
        """Return the commit history, oldest first, with (app_id, batch_id) from the user metadata."""
        table_uri = ref.uri
        records = []
        for row in (
            self._table(table_uri)
            .history()
            .select("version", "timestamp", "operation", "userMetadata")
            .collect()
        ):
            stamp = row["timestamp"]
            records.append(
                commit_record(
                    int(row["version"]),
                    stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC),
                    str(row["operation"]),
                    json.loads(row["userMetadata"]) if row["userMetadata"] else {},
                )
            )
        return sorted(records, key=lambda record: record.version)

    def create_table(
        self,
        ref: TableRef,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] | None = None,
        change_data_feed: bool = False,
    ) -> int:
        """Create the table if there is none (deletion vectors pinned off for Delta 3.2 readers)."""
        table_uri = ref.uri
        from delta.tables import DeltaTable

        spark = self._session()
        if not self._exists(table_uri):
            empty = spark.createDataFrame(normalize_timestamps(schema.empty_table()))
            builder = (
                DeltaTable.createIfNotExists(spark)
                .location(table_uri)
                .addColumns(empty.schema)
                .property("delta.enableDeletionVectors", "false")
            )
            if change_data_feed:
                builder = builder.property("delta.enableChangeDataFeed", "true")
            if partition_by:
                builder = builder.partitionedBy(*partition_by)
            builder.execute()
        version = self.version(ref)
        assert version is not None
        return version

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
        """Upsert by ``keys`` with the same rules as ``DeltaRsEngine.merge``."""
        table_uri = ref.uri
        source, columns = merge_source(data, keys, precombine, delete_column)
        if not self._exists(table_uri):
            self.create_table(ref, source.select(columns).schema, partition_by=partition_by)
        elif app_id is not None and batch_id is not None:
            done = self.transaction_version(ref, app_id)
            if done is not None and done >= batch_id:
                return MergeResult(
                    committed=False, table_version=self.version(ref) or 0, source_rows=data.num_rows
                )
        spark = self._session()

        def col(alias: str, name: str) -> str:
            return f"{alias}.{quote_identifier(name, quote='`')}"

        on = " AND ".join(f"{col('t', k)} = {col('s', k)}" for k in keys)
        newer = f"{col('s', precombine)} >= {col('t', precombine)}"
        updates = {quote_identifier(c, quote="`"): col("s", c) for c in columns}
        merger = self._table(table_uri).alias("t").merge(spark.createDataFrame(source).alias("s"), on)
        if delete_column:
            flag = col("s", delete_column)
            merger = (
                merger.whenMatchedDelete(condition=f"{newer} AND {flag}")
                .whenMatchedUpdate(condition=f"{newer} AND NOT {flag}", set=updates)
                .whenNotMatchedInsert(condition=f"NOT {flag}", values=updates)
            )
        else:
            merger = merger.whenMatchedUpdate(condition=newer, set=updates).whenNotMatchedInsert(
                values=updates
            )
        metadata = _user_metadata(app_id, batch_id)
        with _session_settings(spark, {"spark.databricks.delta.commitInfo.userMetadata": metadata}):
            merger.execute()
        metrics = self._table(table_uri).history(1).collect()[0]["operationMetrics"] or {}
        return MergeResult(
            committed=True,
            table_version=self.version(ref) or 0,
            source_rows=data.num_rows,
            inserted=int(metrics.get("numTargetRowsInserted", 0)),
            updated=int(metrics.get("numTargetRowsUpdated", 0)),
            deleted=int(metrics.get("numTargetRowsDeleted", 0)),
        )

    def delete(
        self,
        ref: TableRef,
        predicate: str,
        *,
        app_id: str | None = None,
        batch_id: int | None = None,
    ) -> DeleteResult:
        """DELETE WHERE ``predicate`` (Spark SQL), with the transaction in the commit's user metadata."""
        table_uri = ref.uri
        if (app_id is None) != (batch_id is None):
            raise LakeError(f"delete from {table_uri}: give both app_id and batch_id, or neither.")
        before = self.version(ref)
        if before is None:
            raise LakeTableNotFoundError.at(table_uri)
        if app_id is not None and batch_id is not None:
            done = self.transaction_version(ref, app_id)
            if done is not None and done >= batch_id:
                return DeleteResult(committed=False, table_version=before)
        metadata = _user_metadata(app_id, batch_id)
        spark = self._session()
        with _session_settings(spark, {"spark.databricks.delta.commitInfo.userMetadata": metadata}):
            self._table(table_uri).delete(predicate)
        after = self.version(ref) or before
        if after == before:
            return DeleteResult(committed=False, table_version=after)
        metrics = self._table(table_uri).history(1).collect()[0]["operationMetrics"] or {}
        return DeleteResult(
            committed=True, table_version=after, deleted=int(metrics.get("numDeletedRows", 0))
        )

    def checkpoint(self, ref: TableRef) -> int:
        """Checkpoint the Delta log through the session's DeltaLog (delta-spark has no Python call for it)."""
        spark = self._session()
        jvm: Any = spark._jvm
        jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, ref.uri).checkpoint()
        return self.version(ref) or 0

    def file_stats(self, ref: TableRef) -> FileStats:
        """numFiles and sizeInBytes from DESCRIBE DETAIL."""
        row = self._table(ref.uri).detail().collect()[0].asDict()
        return FileStats(
            version=self.version(ref) or 0, files=int(row["numFiles"]), bytes=int(row["sizeInBytes"])
        )

    def compact(
        self,
        ref: TableRef,
        *,
        z_order_by: Sequence[str] | None = None,
        target_file_size: int | None = None,
    ) -> CompactResult:
        """OPTIMIZE (bin-packing, or Z-order by ``z_order_by``)."""
        table_uri = ref.uri
        spark = self._session()
        size = str(target_file_size) if target_file_size is not None else None
        with _session_settings(spark, {"spark.databricks.delta.optimize.maxFileSize": size}):
            builder = self._table(table_uri).optimize()
            metrics_df = builder.executeZOrderBy(*z_order_by) if z_order_by else builder.executeCompaction()
            metrics = metrics_df.collect()[0]["metrics"]
        return CompactResult(
            files_removed=int(metrics["numFilesRemoved"]),
            files_added=int(metrics["numFilesAdded"]),
            table_version=self.version(ref) or 0,
        )

    def vacuum(
        self,
        ref: TableRef,
        *,
        retention_hours: int = DEFAULT_RETENTION_HOURS,
        full: bool = False,
        dry_run: bool = False,
    ) -> list[str]:
        """VACUUM; Spark's vacuum always covers untracked files, so ``full`` changes nothing here."""
        table_uri = ref.uri
        del full
        spark = self._session()
        check = "false" if retention_hours < DEFAULT_RETENTION_HOURS else None
        dry = " DRY RUN" if dry_run else ""
        path = quote_identifier(table_uri, quote="`")
        with _session_settings(spark, {"spark.databricks.delta.retentionDurationCheck.enabled": check}):
            rows = spark.sql(f"VACUUM delta.{path} RETAIN {int(retention_hours)} HOURS{dry}").collect()
        return [str(r[0]) for r in rows] if dry_run else []

    def read(
        self,
        ref: TableRef,
        *,
        version: int | None = None,
        timestamp: datetime | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
    ) -> pa.Table:
        """Read now, at ``versionAsOf``, or at ``timestampAsOf``; filters become a Spark ``where``."""
        table_uri = ref.uri
        if version is not None and timestamp is not None:
            raise LakeError(f"read of {table_uri}: give version or timestamp, not both.")
        check_filters(table_uri, list(filters or ()))
        reader = self._session().read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        elif timestamp is not None:
            reader = reader.option(
                "timestampAsOf", timestamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            )
        frame = reader.load(table_uri)
        for condition in filters or ():
            frame = frame.where(_spark_condition(condition))
        return to_arrow(frame.select(*columns) if columns else frame)

    def read_changes(
        self,
        ref: TableRef,
        *,
        starting_version: int = 0,
        ending_version: int | None = None,
    ) -> pa.Table:
        """Read the change data feed between two versions (inclusive)."""
        table_uri = ref.uri
        reader = (
            self._session()
            .read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", starting_version)
        )
        if ending_version is not None:
            reader = reader.option("endingVersion", ending_version)
        return to_arrow(reader.load(table_uri))

    def protocol(self, ref: TableRef) -> TableProtocol:
        """Return minReaderVersion / minWriterVersion and table features from DESCRIBE DETAIL."""
        table_uri = ref.uri
        row = self._table(table_uri).detail().collect()[0].asDict()
        features = tuple(row.get("tableFeatures") or ())
        return TableProtocol(
            min_reader_version=int(row["minReaderVersion"]),
            min_writer_version=int(row["minWriterVersion"]),
            writer_features=features,
        )


def _user_metadata(app_id: str | None, batch_id: int | None) -> str | None:
    # Delta's userMetadata is one string: the commit keys as JSON, which commits() reads back.
    if app_id is None or batch_id is None:
        return None
    return json.dumps(commit_metadata(app_id, batch_id))


def _spark_condition(condition: Filter) -> Any:
    from pyspark.sql import functions as F

    name, op, value = condition
    column = F.col(quote_identifier(name, quote="`"))
    if op == "in":
        return column.isin(list(value))
    if op == "not in":
        return ~column.isin(list(value))
    return {
        "=": column == value,
        "!=": column != value,
        "<": column < value,
        "<=": column <= value,
        ">": column > value,
        ">=": column >= value,
    }[op]


@contextmanager
def _session_settings(spark: SparkSession, settings: Mapping[str, str | None]) -> Iterator[None]:
    """Set session settings for one operation and put back what was there before (None: leave as is)."""
    previous: dict[str, str | None] = {}
    for key, value in settings.items():
        if value is not None:
            previous[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
