"""The JVM Delta engine (delta-spark): what every Spark job writes its tables with.

Batches arrive as DataFrames and are written by the executors (``DataFrame.write.format("delta")`` with
Delta's idempotent ``txnAppId`` / ``txnVersion``); the driver reads only the Delta log. A ``pa.Table`` is
accepted too (tests, small driver-side data) and becomes a one-partition DataFrame. Locally the jars come from
``make jars`` (``jobs.session``); EMR and Synapse have Delta built in. One writer per table on S3: the default
S3 log store is safe for one writing driver, and JVM Delta must never share an S3 table with delta-rs writers
(they commit with conditional puts, it does not).
"""

from __future__ import annotations

import json
import threading
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
# How many of a table's newest commits a transaction lookup reads before it asks the snapshot's full state.
_TXN_SCAN_COMMITS = 10


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, and why not. Truthy when it can."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


class JvmDeltaEngine(TableHandles):
    """Delta tables through delta-spark in the active SparkSession (EMR's Delta 4.2, Synapse's Delta 3.2).

    Storage settings come from Spark's Hadoop configuration there; ``storage_options`` are ignored.
    """

    name = "jvm"
    # foreach_batch_writer hands this engine the batch DataFrame itself: its rows stay on the executors.
    accepts_frames = True

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
            return Availability(
                False,
                f"delta-spark's Python half (delta.tables) does not import ({error}): it comes from the Delta jar on "
                "spark.submit.pyFiles (EMR's steps name /usr/share/aws/delta/lib/delta-spark.jar; "
                "jobs.session.build_session the pinned jar) or from the delta-spark package",
            )
        spark = self._session_or_none()
        if spark is None:
            return Availability(False, "no active SparkSession to load the Delta classes in")
        load = self._load_class or (lambda name: _load_jvm_class(spark, name))
        try:
            load(_DELTA_CLASS)
        except Exception as error:  # py4j wraps ClassNotFoundException in Py4JJavaError
            return Availability(
                False,
                f"JVM class {_DELTA_CLASS} does not load ({type(error).__name__}); locally 'make jars' fetches "
                "the Delta jars jobs.session.build_session starts Spark with; on EMR enable the delta-defaults "
                "classification (Synapse has Delta built in)",
            )
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        if "DeltaSparkSessionExtension" not in extensions:
            return Availability(
                False, "spark.sql.extensions lacks io.delta.sql.DeltaSparkSessionExtension; set it at startup"
            )
        return Availability(True, "delta-spark classes load")

    def table(self, uri: str, *, storage_options: Mapping[str, str] | None = None) -> Any:
        """A handle on the table at ``uri``; an ``s3://`` table's endpoint and region (delta-rs storage options,
        from ``storage_options_for``) become that bucket's S3A settings in the session."""
        settings = hadoop_settings(uri, storage_options or {})
        if settings:
            spark = self._session()
            for key, value in settings.items():
                # Session settings are copied into every Hadoop configuration Spark and Delta make (executors
                # included); per bucket, so two tables on two endpoints do not collide.
                spark.conf.set(key, value)
        return super().table(uri, storage_options=storage_options)

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
        if self._snapshot(table_uri) is None:
            raise LakeTableNotFoundError.at(table_uri)
        return DeltaTable.forPath(spark, table_uri)

    def _snapshot(self, table_uri: str) -> Any | None:
        """The table's latest snapshot from its Delta log (a listing and the newest commits; no Spark job), or
        None when there is no table."""
        spark = self._session()
        jvm: Any = spark._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table_uri)
        none = jvm.scala.Option.empty()
        if _spark_major(spark) >= 4:
            # Delta 4.x: (stalenessAcceptable, checkIfUpdatedSinceTs, catalogTableOpt)
            snapshot = log.update(False, none, none)
        else:
            snapshot = log.update(False, none)  # Delta 3.2 (Synapse): no catalog table argument
        return snapshot if int(snapshot.version()) >= 0 else None

    def _exists(self, table_uri: str) -> bool:
        return self._snapshot(table_uri) is not None

    def _frame(self, data: pa.Table) -> DataFrame:
        # Driver-side data is small by nature (tests, tools): one partition, so one file per commit.
        return driver_frame(self._session(), data).coalesce(1)

    def _commit_actions(self, table_uri: str, version: int) -> list[dict[str, Any]]:
        """The actions of one commit file, read through Hadoop's file system (one small file)."""
        jvm: Any = self._session()._jvm
        return self._read_actions(
            jvm.org.apache.hadoop.fs.Path(f"{table_uri.rstrip('/')}/_delta_log/{version:020d}.json")
        )

    def _read_actions(self, path: Any, fs: Any = None, *, only: str | None = None) -> list[dict[str, Any]]:
        """The actions of the commit file at ``path`` (a Hadoop ``Path``), through ``fs`` (the path's own file
        system when None); with ``only``, just the actions of that kind (other lines are not parsed)."""
        spark = self._session()
        jvm: Any = spark._jvm
        if fs is None:
            fs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
        stream = fs.open(path)
        try:
            text = str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()
        lines = [line for line in text.splitlines() if line.strip()]
        if only is not None:
            lines = [line for line in lines if f'"{only}"' in line]
        actions = [json.loads(line) for line in lines]
        return actions if only is None else [a for a in actions if only in a]

    # -- interface -------------------------------------------------------------------------------------

    def append(
        self,
        ref: TableRef,
        data: pa.Table | DataFrame,
        *,
        app_id: str,
        batch_id: int,
        partition_by: Sequence[str] | None = None,
        schema_mode: SchemaMode = "strict",
        target_file_size: int | None = None,
    ) -> AppendResult:
        """Append in one commit with Delta's own idempotent-write options (txnAppId / txnVersion).

        ``data`` is written by the executors when it is a DataFrame. Delta skips a (app_id, batch_id) it has
        seen, itself, from the log, so a new process replaying a batch writes nothing: whether this call
        committed is read back from the log (the newest commit carries this transaction), as are its rows.
        """
        table_uri = ref.uri
        frame = self._frame(data) if isinstance(data, pa.Table) else data
        for key, value in hadoop_settings(table_uri, ref.storage_options).items():
            # A foreachBatch frame belongs to the query's own session, whose settings were copied at its start.
            frame.sparkSession.conf.set(key, value)
        before = self._snapshot(table_uri)
        if before is not None:
            self._check_schema(table_uri, _arrow_schema(frame), schema_mode)
        writer = (
            frame.write.format("delta")
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
        after = self._snapshot(table_uri)
        if after is None:
            raise LakeError(
                f"append to {table_uri} reported success but no Delta table is there; check the path."
            )
        version = int(after.version())
        first = 0 if before is None else int(before.version()) + 1
        # Our commit is the one among the new versions that carries this transaction (a maintenance OPTIMIZE
        # may have committed after it); none when Delta skipped the batch as already written.
        for candidate in range(version, first - 1, -1):
            actions = self._commit_actions(table_uri, candidate)
            txn: dict[str, Any] = next((a["txn"] for a in actions if "txn" in a), {})
            if (txn.get("appId"), txn.get("version")) == (app_id, batch_id):
                info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
                rows = int((info.get("operationMetrics") or {}).get("numOutputRows", 0))
                return AppendResult(committed=True, table_version=version, rows=rows)
        return AppendResult(committed=False, table_version=version, rows=0)

    def _check_schema(self, table_uri: str, data: pa.Schema, mode: SchemaMode) -> None:
        existing = _arrow_schema(self._session().read.format("delta").load(table_uri))
        check_schema(table_uri, existing, normalize_timestamps(data.empty_table()).schema, mode)

    def transaction_version(self, ref: TableRef, app_id: str) -> int | None:
        """Return the last batch id committed for ``app_id`` (Delta's own transaction record), or None."""
        snapshot = self._snapshot(ref.uri)
        if snapshot is None:
            return None
        # Newest commit first: the first transaction of app_id found is its latest (Delta commits nothing for
        # a batch it skips as written already). That is one small read when the app wrote last, as a job's own
        # tables are; the snapshot's full state costs a Spark job instead (about 1 s on two cores, twice a sales
        # batch). Only the commits the snapshot read since its checkpoint are looked at, the newest few of them.
        # Delta's state also drops transactions older than delta.setTransactionRetentionDuration, which no table
        # of ours sets; a scan that finds an expired one says "committed" of a batch that was: the safe side.
        deltas = snapshot.logSegment().deltas()
        count = int(deltas.size())
        scanned = min(count, _TXN_SCAN_COMMITS)
        fs = None
        for index in range(count - 1, count - 1 - scanned, -1):
            path = deltas.apply(index).getPath()
            if fs is None:
                fs = path.getFileSystem(self._session()._jsparkSession.sessionState().newHadoopConf())
            for action in self._read_actions(path, fs, only="txn"):
                if action["txn"].get("appId") == app_id:
                    return int(action["txn"]["version"])
        if scanned == count > 0 and _commit_version(deltas.apply(0).getPath().getName()) == 0:
            return None  # every commit since the table was created, and none of app_id's
        found = snapshot.transactions().get(app_id)
        return int(found.get()) if found.isDefined() else None

    def version(self, ref: TableRef) -> int | None:
        """Return the table's latest version, or None when there is no table at the URI."""
        snapshot = self._snapshot(ref.uri)
        return None if snapshot is None else int(snapshot.version())

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
            empty = driver_frame(spark, schema.empty_table())
            # Deletion vectors stay off (Delta's default for new tables; set for local sessions in
            # jobs.session): they are a table feature Delta 3.2 readers (Synapse) and delta-rs' writers reject,
            # and naming the property here would move the table to the table-features protocol (writer 7).
            builder = DeltaTable.createIfNotExists(spark).location(table_uri).addColumns(empty.schema)
            if change_data_feed:
                # Writer 4, CDF's legacy protocol, as delta-rs writes it: Delta 4 alone would pick the
                # table-features protocol (writer 7), which older readers need not understand.
                builder = builder.property("delta.enableChangeDataFeed", "true").property(
                    "delta.minWriterVersion", "4"
                )
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
        merger = self._table(table_uri).alias("t").merge(driver_frame(spark, source).alias("s"), on)
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
        with _session_settings(spark, _dml_settings(app_id, batch_id)):
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
        spark = self._session()
        with _session_settings(spark, _dml_settings(app_id, batch_id)):
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
        """VACUUM, returning the files it deleted (listed by a DRY RUN just before, under the same retention);
        Spark's vacuum always covers untracked files, so ``full`` changes nothing here."""
        table_uri = ref.uri
        del full
        spark = self._session()
        check = "false" if retention_hours < DEFAULT_RETENTION_HOURS else None
        path = quote_identifier(table_uri, quote="`")
        statement = f"VACUUM delta.{path} RETAIN {int(retention_hours)} HOURS"
        with _session_settings(spark, {"spark.databricks.delta.retentionDurationCheck.enabled": check}):
            # The list is file paths only (no rows of the table): what a person reads in the maintenance log.
            listed = [str(r[0]) for r in spark.sql(f"{statement} DRY RUN").collect()]
            if not dry_run and listed:
                spark.sql(statement).collect()
        return listed

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
        elif timestamp is not None and not self._after_latest_commit(table_uri, timestamp):
            # Delta refuses an instant after its newest commit; the table as of then is its latest version
            # (what delta-rs answers), so that read is a plain one.
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

    def _after_latest_commit(self, table_uri: str, instant: datetime) -> bool:
        snapshot = self._snapshot(table_uri)
        if snapshot is None:
            raise LakeTableNotFoundError.at(table_uri)
        return instant.timestamp() * 1000 > int(snapshot.timestamp())

    def protocol(self, ref: TableRef) -> TableProtocol:
        """Return minReaderVersion / minWriterVersion, and the table features of a table-features protocol.

        DESCRIBE DETAIL also lists the features a legacy protocol implies (``appendOnly``, ``invariants`` for
        writer 2); those are not table features of the table's own, so they are left out as delta-rs does.
        """
        table_uri = ref.uri
        row = self._table(table_uri).detail().collect()[0].asDict()
        reader, writer = int(row["minReaderVersion"]), int(row["minWriterVersion"])
        features = tuple(row.get("tableFeatures") or ())
        return TableProtocol(
            min_reader_version=reader,
            min_writer_version=writer,
            reader_features=features if reader >= 3 else (),
            writer_features=features if writer >= 7 else (),
        )


def driver_frame(spark: SparkSession, data: pa.Table) -> DataFrame:
    """A DataFrame of driver-side Arrow data (tests, tools, a few records): Spark 4 takes the Arrow table,
    Spark 3.5 (Synapse) takes it through pandas with the schema spelled out."""
    data = normalize_timestamps(data)
    if _spark_major(spark) >= 4:
        return spark.createDataFrame(data)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(data.to_pandas(), schema=from_arrow_schema(data.schema))


def _commit_version(name: str) -> int:
    """The table version a commit file's name carries (``00000000000000000007.json``, or a catalog-managed
    table's unpublished ``00000000000000000007.<uuid>.json``)."""
    return int(name.split(".", 1)[0])


def _spark_major(spark: SparkSession) -> int:
    return int(spark.version.split(".")[0])


def hadoop_settings(table_uri: str, storage_options: Mapping[str, str]) -> dict[str, str]:
    """The S3A settings for an ``s3://`` table's bucket from its delta-rs storage options (endpoint, path-style
    addressing, plain HTTP, region), as session settings. Empty for any other table, or options naming none."""
    from urllib.parse import urlparse

    parsed = urlparse(table_uri)
    if parsed.scheme.lower() not in ("s3", "s3a") or not parsed.netloc:
        return {}
    prefix = f"fs.s3a.bucket.{parsed.netloc}."
    settings: dict[str, str] = {}
    endpoint = storage_options.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings[prefix + "endpoint"] = endpoint
        settings[prefix + "connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    if storage_options.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() == "false":
        settings[prefix + "path.style.access"] = "true"
    region = storage_options.get("AWS_REGION")
    if region:
        settings[prefix + "endpoint.region"] = region
    return settings


def _arrow_schema(frame: DataFrame) -> pa.Schema:
    """A DataFrame's schema in Arrow terms, without running it (no rows move)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema)


def _load_jvm_class(spark: SparkSession, name: str) -> object:
    # Through the context class loader: jars given by spark.jars are not on the JVM's system class path.
    jvm: Any = spark._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    return jvm.java.lang.Class.forName(name, True, loader)


def _dml_settings(app_id: str | None, batch_id: int | None) -> dict[str, str | None]:
    """Session settings that make a MERGE or DELETE carry the transaction (app_id, batch_id): in Delta's own
    transaction record (so a replay is skipped by Delta, and ``transaction_version`` sees it) and in the
    commit's user metadata."""
    return {
        "spark.databricks.delta.commitInfo.userMetadata": _user_metadata(app_id, batch_id),
        "spark.databricks.delta.write.txnAppId": app_id if batch_id is not None else None,
        "spark.databricks.delta.write.txnVersion": str(batch_id)
        if app_id is not None and batch_id is not None
        else None,
    }


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


# Session settings are shared by every thread of the session (each foreachBatch of a query, a maintenance
# thread): an operation that sets some (a MERGE's transaction id, OPTIMIZE's file size) holds this lock from
# setting them to putting them back, so no other thread's operation runs with them.
_SETTINGS_LOCK = threading.RLock()


@contextmanager
def _session_settings(spark: SparkSession, settings: Mapping[str, str | None]) -> Iterator[None]:
    """Set session settings for one operation and put back what was there before (None: leave as is); one
    such operation at a time per process (:data:`_SETTINGS_LOCK`)."""
    with _SETTINGS_LOCK:
        yield from _with_settings(spark, settings)


def _with_settings(spark: SparkSession, settings: Mapping[str, str | None]) -> Iterator[None]:
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
