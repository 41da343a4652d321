"""The ``fraud`` job: bronze transactions -> silver ``transactions`` (scored), ``fraud_alerts``, quarantine.

``python -m jobs fraud --source-table URI --lake URI --checkpoint PATH [--trigger ...]``. Per account, in event
time, a transaction under 1.00 followed within 60 s by one over 500.00 raises one alert
(``jobs.pipelines._fraud_rule``); the per-account window lives in the checkpoint's RocksDB state store and
expires through an event-time timeout. Every transaction gets the model's ``fraud_score``. Each micro-batch
is one Delta commit per table, carrying the transaction (query id, batch id): replays skip what is there.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.errors import SettingsError
from jobs.pipelines._envelope import (
    INVALID,
    KIND,
    OTHER,
    QUARANTINE_SCHEMA,
    REASON,
    VALID,
    Envelope,
    Field,
    classify,
    quarantine_rows,
)
from jobs.pipelines._fraud_model import FraudModel, load_model, scorer
from jobs.pipelines._fraud_state import INPUT_COLUMNS, OUTPUT_SCHEMA, STATE_SCHEMA, detect_frauds
from jobs.pipelines._job import (
    JobSettings,
    add_common_arguments,
    add_max_files_argument,
    check_max_files,
    common_settings,
    preflight,
    query_app_id,
    read_bronze,
    run_until_done,
)
from jobs.pipelines._layout import LayoutResult, optimize

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from jobs.lake import LakeTable

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# What `detect` returns (the state function's columns, times as timestamps), plus the model's score.
DETECTED_SCHEMA = (
    OUTPUT_SCHEMA.replace("txn_us bigint", "txn_time timestamp")
    .replace("small_txn_us bigint", "small_txn_time timestamp")
    .replace("watermark_us bigint", "watermark timestamp")
)
SCORED_SCHEMA = DETECTED_SCHEMA + ", fraud_score double"
# Spark's metadata key marking a column as carrying an event-time watermark (EventTimeWatermark.delayKey).
_DELAY_KEY = "spark.watermarkDelayMs"
_WATERMARK_GUARD = "_watermark_guard"


# Fixed table names under --lake (DESIGN.md), so tools and people find them.
TRANSACTIONS = "transactions"
QUARANTINE = "transactions_quarantine"
ALERTS = "fraud_alerts"
_UTC = pa.timestamp("us", tz="UTC")


def _schema(*fields: pa.Field[Any]) -> pa.Schema:
    return pa.schema(fields)


TRANSACTIONS_SCHEMA = _schema(
    pa.field("transaction_id", pa.string()),
    pa.field("account_id", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("txn_time", _UTC),
    pa.field("event_id", pa.string()),
    pa.field("event_time", _UTC),
    pa.field("late", pa.bool_()),
    pa.field("watermark", _UTC),
    pa.field("seconds_since_previous", pa.float64()),
    pa.field("previous_amount", pa.float64()),
    pa.field("count_last_minute", pa.int32()),
    pa.field("fraud_score", pa.float64()),
    pa.field("model_version", pa.string()),
    pa.field("shard_id", pa.string()),
    pa.field("sequence_number", pa.string()),
    pa.field("batch_id", pa.int64()),
)
ALERTS_SCHEMA = _schema(
    pa.field("account_id", pa.string()),
    pa.field("small_transaction_id", pa.string()),
    pa.field("large_transaction_id", pa.string()),
    pa.field("small_amount", pa.float64()),
    pa.field("large_amount", pa.float64()),
    pa.field("small_txn_time", _UTC),
    pa.field("large_txn_time", _UTC),
    pa.field("detected_at", _UTC),
    pa.field("batch_id", pa.int64()),
)


@dataclass(frozen=True)
class FraudSettings:
    """The fraud job's settings, validated once.

    Attributes:
        job: the common flags (source table, lake, checkpoint, trigger, endpoint, region).
        watermark_seconds: how far behind the newest ``txn_time`` a transaction may arrive and still be
            judged; later ones are written to silver flagged ``late``.
        model: the model artifact (path or URI); None: the one packaged with the jobs.
        max_files_per_trigger: bronze files read per micro-batch at most.
    """

    job: JobSettings
    watermark_seconds: int = 600
    model: str | None = None
    max_files_per_trigger: int = 1000

    def __post_init__(self) -> None:
        if self.watermark_seconds < 0:
            raise SettingsError(f"--watermark: expected seconds >= 0, found {self.watermark_seconds}.")
        check_max_files(self.max_files_per_trigger)

    def table_uri(self, name: str) -> str:
        return self.job.table(name)


def detect(transactions: DataFrame, *, watermark_seconds: int) -> DataFrame:
    """Per-account detection over parsed transactions; one row per transaction and per alert (``kind``).

    ``transactions`` needs ``account_id``, ``transaction_id``, ``amount``, ``txn_time`` (timestamp),
    ``event_id``, ``event_time``, ``shard_id``, ``sequence_number``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    watermarked = transactions.withWatermark("txn_time", f"{watermark_seconds} seconds")
    # Spark drops rows at or behind the watermark before an event-time-timeout state function sees them,
    # matching on the column that carries the watermark's metadata in the grouped input. The input keeps
    # the event time only as `txn_us` (plain microseconds) and carries the watermark on a null column
    # instead, which no row is ever "behind": the watermark still exists (the timeout needs it), and late
    # rows reach the state function, which judges lateness by the same watermark, flags them, and never
    # loses them. tests/jobs/pipelines/test_fraud_job.py::test_late_transactions_are_written_flagged_and_not_judged
    # proves late rows arrive.
    guard = (
        F.lit(None).cast("timestamp").alias(_WATERMARK_GUARD, metadata={_DELAY_KEY: watermark_seconds * 1000})
    )
    grouped = watermarked.select(
        *[F.expr("unix_micros(txn_time)").alias(c) if c == "txn_us" else F.col(c) for c in INPUT_COLUMNS],
        guard,
    )
    detected = grouped.groupBy("account_id").applyInPandasWithState(
        detect_frauds,
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    )
    as_time = {"txn_us": "txn_time", "small_txn_us": "small_txn_time", "watermark_us": "watermark"}
    return detected.select(
        *[
            F.expr(f"timestamp_micros({c})").alias(as_time[c]) if c in as_time else F.col(c)
            for c in detected.columns
        ]
    )


def score(detected: DataFrame, model: FraudModel) -> DataFrame:
    """Add ``fraud_score`` (the model's probability) to every transaction row, in one ``mapInPandas``."""
    return detected.mapInPandas(scorer(model), SCORED_SCHEMA)


# The one output schema of the query: detection rows (txn / alert / duplicate), scored, plus the bronze
# rows that are not this pipeline's valid transactions (invalid -> quarantine / other), told apart by `kind`.
QUERY_SCHEMA = SCORED_SCHEMA + ", data binary, reason string"

# What this pipeline reads from bronze (contract C1): transactions, each field typed and checked.
ENVELOPE = Envelope(
    "transactions",
    (
        Field(
            "transaction_id",
            "transaction_id",
            "string",
            rule="length(trim({})) > 0",
            expects="a non-empty id",
        ),
        Field(
            "account_id",
            "account_id",
            "string",
            rule="length(trim({})) > 0",
            expects="a non-empty account id",
        ),
        Field(
            "amount",
            "amount",
            "double",
            rule="{} > 0 AND NOT isnan({}) AND {} < 1e12",
            expects="a positive, finite amount",
        ),
        Field("txn_time", "txn_time", "timestamp"),
    ),
)


def classify_transactions(bronze: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(this pipeline's valid transactions, every other bronze row as ``kind`` invalid/other with its reason)."""
    from pyspark.sql import functions as F

    rows = classify(bronze, ENVELOPE)
    transactions = rows.where(F.col(KIND) == VALID).select(
        "account_id",
        "transaction_id",
        "amount",
        "txn_time",
        "event_id",
        "event_time",
        "shard_id",
        "sequence_number",
    )
    rest = rows.where(F.col(KIND) != VALID).select(
        F.col(KIND).alias("kind"),
        # Other scenarios' rows are only counted: their payloads need not travel to the driver.
        F.when(F.col(KIND) == INVALID, F.col("data")).alias("data"),
        "shard_id",
        "sequence_number",
        F.col(REASON).alias("reason"),
    )
    return transactions, rest


def build_query(bronze: DataFrame, *, watermark_seconds: int, model: FraudModel) -> DataFrame:
    """Bronze rows in, every output row out (``kind``): the whole pipeline as one DataFrame transform."""
    transactions, rest = classify_transactions(bronze)
    scored = score(detect(transactions, watermark_seconds=watermark_seconds), model)
    return scored.unionByName(rest, allowMissingColumns=True)


_SPARK_TYPES = {
    pa.string(): "string",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.int32(): "int",
    pa.int64(): "bigint",
    _UTC: "timestamp",
}


def split_frames(
    batch: DataFrame, *, batch_id: int, now: datetime, model_version: str
) -> dict[str, DataFrame]:
    """One micro-batch's query rows -> each table's rows (cast to the table's schema), on the executors."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    stamps = {"model_version": F.lit(model_version), "batch_id": F.lit(batch_id)}

    def typed(column: Column, field: pa.Field[Any]) -> Column:
        return column.cast(_SPARK_TYPES[field.type]).alias(field.name)

    def column(name: str) -> Column:
        if name in stamps:
            return stamps[name]
        return F.col(name) if name in batch.columns else F.lit(None)

    transactions = batch.filter(kind == "txn").select(
        *[typed(column(f.name), f) for f in TRANSACTIONS_SCHEMA]
    )
    sources = {
        "account_id": F.col("account_id"),
        "small_transaction_id": F.col("small_transaction_id"),
        "large_transaction_id": F.col("transaction_id"),
        "small_amount": F.col("small_amount"),
        "large_amount": F.col("amount"),
        "small_txn_time": F.col("small_txn_time"),
        "large_txn_time": F.col("txn_time"),
        "detected_at": F.lit(now),
        "batch_id": F.lit(batch_id),
    }
    alerts = batch.filter(kind == "alert").select(*[typed(sources[f.name], f) for f in ALERTS_SCHEMA])
    rejected = batch.select(
        "data", "shard_id", "sequence_number", kind.alias(KIND), F.col("reason").alias(REASON)
    )
    return {
        TRANSACTIONS: transactions,
        QUARANTINE: quarantine_rows(rejected, batch_id, now=now),
        ALERTS: alerts,
    }


def kind_counts(batch: DataFrame) -> tuple[dict[str | None, int], int]:
    """Rows per ``kind`` and the late transactions of one batch, from one small aggregate."""
    from pyspark.sql import functions as F

    kinds: dict[str | None, int] = {}
    late = 0
    rows = batch.groupBy("kind").agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when((F.col("kind") == "txn") & F.col("late"), 1).otherwise(0)).alias("late"),
    )
    for row in rows.collect():
        kinds[row["kind"]] = int(row["rows"])
        late += int(row["late"] or 0)
    return kinds, late


_PART_KINDS = {TRANSACTIONS: "txn", QUARANTINE: INVALID, ALERTS: "alert"}


@dataclass(frozen=True)
class FraudTables:
    """The job's three tables, bound to their storage options; written in this order every batch."""

    transactions: LakeTable
    quarantine: LakeTable
    alerts: LakeTable

    @classmethod
    def under(cls, settings: FraudSettings) -> FraudTables:
        """The tables under ``--lake``, written by delta-spark in the active session (delta-rs on Azurite)."""
        from jobs.lake import DeltaRsEngine, JvmDeltaEngine

        def table(name: str) -> LakeTable:
            uri = settings.job.table(name)
            options = settings.job.storage_options(uri)
            # Azurite has no ADLS Gen2 endpoint: no Hadoop file system reaches it (jobs.lake.spark_job_engine).
            on_azurite = str(options.get("AZURE_STORAGE_USE_EMULATOR", "")).lower() == "true"
            engine = DeltaRsEngine() if on_azurite else JvmDeltaEngine()
            return engine.table(uri, storage_options=options)

        return cls(table(TRANSACTIONS), table(QUARANTINE), table(ALERTS))

    def in_order(self) -> list[tuple[str, LakeTable, pa.Schema]]:
        # Alerts last: when an alert is visible, the transactions it names are already in silver.
        return [
            (TRANSACTIONS, self.transactions, TRANSACTIONS_SCHEMA),
            (QUARANTINE, self.quarantine, QUARANTINE_SCHEMA),
            (ALERTS, self.alerts, ALERTS_SCHEMA),
        ]

    def create(self) -> None:
        """Create every table that does not exist yet, so readers find all three from the start."""
        for _, table, schema in self.in_order():
            table.create(schema)


def _needs(table: LakeTable, app_id: str, batch_id: int) -> bool:
    from jobs.lake import with_retries

    def lookup() -> int | None:
        return table.transaction_version(app_id)

    done = with_retries(lookup, what=f"transaction lookup on {table.uri}")
    return done is None or done < batch_id


def batch_counts(kinds: Mapping[str | None, int], *, late: int) -> dict[str, int]:
    """One batch's figures from its rows' kinds. Invariant: bronze = silver + quarantined + duplicates + other."""
    silver, duplicates = kinds.get("txn", 0), kinds.get("duplicate", 0)
    quarantined, other = kinds.get(INVALID, 0), kinds.get(OTHER, 0)
    return {
        "bronze_rows": silver + duplicates + quarantined + other,
        "silver_rows": silver,
        "late": late,
        "quarantined": quarantined,
        "duplicates_removed": duplicates,
        "other_types": other,
        "alerts": kinds.get("alert", 0),
    }


def read_totals(settings: FraudSettings) -> dict[str, int]:
    """The job's counts summed over every batch of its query (also those whose own files were pruned)."""
    return settings.job.batch_metrics().totals()


def read_metrics(settings: FraudSettings) -> list[dict[str, Any]]:
    """Every committed batch's figures (``<checkpoint>/pipeline/metrics``), oldest first."""
    return settings.job.batch_metrics().read_all()


def make_batch_writer(
    spark: SparkSession,
    settings: FraudSettings,
    *,
    model_version: str,
    tables: FraudTables | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function: each table gets the batch once, in one commit with the transaction.

    A table whose transaction version for this query is already at the batch id is skipped, so a batch
    replayed after a crash between two tables' commits (or after all of them, before Spark's checkpoint)
    writes only what is missing. The batch is persisted once (the stateful operator runs once per batch),
    counted with one small aggregate and split in Spark; the executors write the rows (delta-spark).
    """
    from jobs.checkpoint import batches_to_retain
    from jobs.lake import rows_for

    bound = tables or FraudTables.under(settings)
    job = settings.job
    metrics = job.batch_metrics(retain=batches_to_retain(spark))
    identity: list[str] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        if not identity:
            identity.append(query_app_id(spark, settings.job.checkpoint, "fraud"))
        app_id = identity[0]
        started = time.perf_counter()
        pending = [(name, table) for name, table, _ in bound.in_order() if _needs(table, app_id, batch_id)]
        if not pending:
            log.info("fraud: batch %d skipped: every table already has it", batch_id)
            return
        # Every output and count reads this one computation of the batch (the stateful operator runs once).
        batch.persist()
        try:
            kinds, late = kind_counts(batch)
            counts = batch_counts(kinds, late=late)
            parts = split_frames(batch, batch_id=batch_id, now=clock(), model_version=model_version)
            # Before the commits: a replay rewrites the same figures, so every committed batch has one file.
            metrics.write(batch_id, {"batch_id": batch_id, **counts})
            for name, table in pending:
                if not kinds.get(_PART_KINDS[name]):
                    continue  # a replay computes the same empty part: nothing to make idempotent
                table.append(rows_for(table, parts[name]), app_id=app_id, batch_id=batch_id)
        finally:
            batch.unpersist()
        log.info(
            "fraud: batch %d: %s; wrote %s in %.3fs",
            batch_id,
            ", ".join(f"{key} {value}" for key, value in counts.items()),
            ", ".join(name for name, _ in pending),
            time.perf_counter() - started,
        )

    return write


def start(
    spark: SparkSession,
    settings: FraudSettings,
    *,
    bronze: DataFrame | None = None,
    tables: FraudTables | None = None,
) -> StreamingQuery:
    """Start the fraud query and return it (the caller waits on or stops it).

    Args:
        spark: the session.
        settings: the job's settings.
        bronze: the bronze stream to read (default: ``--source-table`` through the Delta reader).
        tables: the output tables (default: the fixed names under ``--lake``).
    """
    job = settings.job
    model = load_model(settings.model)
    bound = tables or FraudTables.under(settings)
    bound.create()
    if bronze is None:
        bronze = read_bronze(spark, job, max_files_per_trigger=settings.max_files_per_trigger)
    # The state store provider is fixed when a checkpoint is created; RocksDB keeps state off the JVM heap.
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    rows = build_query(bronze, watermark_seconds=settings.watermark_seconds, model=model)
    log.info(
        "fraud: %s -> %s/{%s,%s,%s}, checkpoint %s, watermark %d s, model %s",
        job.source_table,
        job.lake.rstrip("/"),
        TRANSACTIONS,
        QUARANTINE,
        ALERTS,
        job.checkpoint,
        settings.watermark_seconds,
        model.version,
    )
    return (
        rows.writeStream.queryName("fraud")
        .option("checkpointLocation", job.checkpoint)
        .foreachBatch(make_batch_writer(spark, settings, model_version=model.version, tables=bound))
        .trigger(processingTime=job.interval)
        .start()
    )


def run(settings: FraudSettings, *, spark: SparkSession | None = None) -> int:
    """Run until drained (available-now) or stopped by SIGINT/SIGTERM; returns the exit code.

    Raises:
        SettingsError: (or a subclass) before Spark starts: an unreadable ``--model``, or from
            :func:`~jobs.pipelines._job.preflight`.
    """
    from jobs.session import build_session

    load_model(settings.model)  # a wrong --model is one line now, not after Spark has started
    preflight("fraud", settings.job, tables=(TRANSACTIONS, QUARANTINE, ALERTS), spark=spark)
    session = spark or build_session("lakestack-fraud")
    return run_until_done(start(session, settings), settings.job, name="fraud")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fraud job's flags: contract C3's, then its own."""
    add_common_arguments(parser)
    parser.add_argument(
        "--watermark",
        type=int,
        default=600,
        help="seconds behind the newest txn_time a transaction may arrive and still be judged; later ones "
        "are written to silver flagged late (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model artifact from train-fraud, path or URI (default: the packaged one)",
    )
    add_max_files_argument(parser)


def settings_from_args(args: argparse.Namespace) -> FraudSettings:
    return FraudSettings(
        job=JobSettings(**common_settings(args)),
        watermark_seconds=args.watermark,
        model=args.model,
        max_files_per_trigger=args.max_files_per_trigger,
    )


def optimize_transactions(
    lake: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    account: str | None = None,
    target_file_size: int | None = None,
) -> LayoutResult | None:
    """Compact and Z-order ``<lake>/transactions`` by ``account_id``; the figures before and after."""
    from jobs.lake import DeltaRsEngine

    uri = f"{lake.rstrip('/')}/{TRANSACTIONS}"
    table = DeltaRsEngine().table(uri, storage_options=storage_options)
    if not table.exists():
        raise SettingsError(
            f"--lake: expected a {TRANSACTIONS} table under {lake}, found none; run the job first."
        )
    return optimize(table, column="account_id", key=account, target_file_size=target_file_size)


def _optimize_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs fraud --optimize",
        description=(
            "Compact and Z-order <lake>/transactions by account_id; print file count, bytes and what a "
            "one-account query reads and costs, before and after, as JSON."
        ),
    )
    parser.add_argument("--optimize", action="store_true", required=True)
    parser.add_argument("--lake", required=True, help="where the fraud job's tables live")
    parser.add_argument("--endpoint-url", default=None, help="S3 endpoint for an emulator (s3:// URIs only)")
    parser.add_argument("--region", default=None, help="AWS region of s3:// tables")
    parser.add_argument(
        "--account", default=None, help="account to measure the query on (default: the busiest)"
    )
    parser.add_argument(
        "--target-file-size", type=int, default=None, help="bytes per rewritten file (default: delta-rs' own)"
    )
    args = parser.parse_args(argv)
    # Only the lake and where it is matter here; the stream's flags are not asked for.
    job = JobSettings(
        source_table=args.lake,
        lake=args.lake,
        checkpoint=args.lake,
        endpoint_url=args.endpoint_url,
        region=args.region,
    )
    uri = job.table(TRANSACTIONS)
    result = optimize_transactions(
        args.lake,
        storage_options=job.storage_options(uri),
        account=args.account,
        target_file_size=args.target_file_size,
    )
    print(json.dumps(result.to_dict() if result else {"optimized": False, "reason": "no rows"}, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(argv or [])
    if "--optimize" in arguments:
        return _optimize_main(arguments)
    parser = argparse.ArgumentParser(
        prog="python -m jobs fraud",
        description=(
            "Detect, per account, a transaction under 1.00 followed within 60 s by one over 500.00; write "
            "scored transactions, alerts and quarantined records to Delta tables under --lake, exactly once. "
            "With --optimize --lake URI: compact and Z-order the transactions table instead (see --optimize -h)."
        ),
    )
    add_arguments(parser)
    return run(settings_from_args(parser.parse_args(arguments)))


__all__ = [
    "ALERTS",
    "ALERTS_SCHEMA",
    "QUARANTINE",
    "QUARANTINE_SCHEMA",
    "TRANSACTIONS",
    "TRANSACTIONS_SCHEMA",
    "FraudSettings",
    "FraudTables",
    "add_arguments",
    "build_query",
    "detect",
    "main",
    "optimize_transactions",
    "read_metrics",
    "read_totals",
    "run",
    "score",
    "settings_from_args",
    "split_frames",
    "start",
]
