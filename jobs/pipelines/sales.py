"""The `sales` job: bronze Delta table -> silver ``sales``, ``sales_quarantine``, gold ``sales_by_product_minute``
(and optionally the same silver rows as JSON files), every bronze row accounted for, exactly once.

    python -m jobs sales --source-table URI --lake URI --checkpoint PATH
        [--trigger available-now | processing-time=<N>s] [--endpoint-url URL] [--region R]
        [--json-sink URI] [--watermark SECONDS] [--max-files-per-trigger N] [--delta-reader auto|spark|python]

Spark 3.5-clean (it runs on Synapse): bronze comes through ``_job.read_bronze`` (Spark's own Delta source).
Every row stays on the executors; the driver reads silver's file statistics and a small count per batch.

The stream: Spark classifies the bronze rows (``_envelope.classify``), and Spark's state keeps the first
delivery of each valid event_id (``dropDuplicatesWithinWatermark``; a redelivery within ``--watermark`` seconds
of processing time is always removed; the state forgets an event_id at the first batch with rows once twice
``--watermark`` has passed since its first delivery, as Spark keeps a key until its time plus the delay falls
below the watermark, itself the newest time less the delay). Each micro-batch carries both: every
bronze row (for the counts and the quarantine) and the rows the state kept (:func:`deduplicated`). Per
micro-batch, persisted once: invalid rows to the quarantine, kept rows to silver, per product and event-time
minute the revenue into gold by a delta-spark MERGE that adds the batch's sums (a table with no rows from the
batch gets no commit, but silver: its commit marks the batch done). Rows older than the
watermark (the newest sale in silver less ``--watermark``) are late: kept in silver, counted, and added to
gold's ``late_*`` columns, not to its revenue.

Each table's commit carries the transaction (query id, batch id) and a replay skips tables that have it.
Silver is written last: it is the basis of the watermark, so a replay after a crash part-way through a batch
sees silver as the first attempt did; Spark's state is replayed from the batch before, so the same rows are
kept. Tables on the Azurite emulator (no Hadoop file system reaches it) are written by delta-rs from the
driver, as before.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc

from jobs._files import filesystem_for, join, write_file
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
    quarantine_table,
)
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
from jobs.pipelines._sales_route import GOLD_KEYS, GOLD_SCHEMA, SILVER_SCHEMA, add_to_gold

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from jobs.lake import LakeTable

log = logging.getLogger(__name__)

SILVER, GOLD = "sales", "sales_by_product_minute"
ENVELOPE = Envelope(
    "sales",
    (
        Field("sales_id", "SalesId", "bigint", rule="{} > 0", expects="a positive id"),
        Field("product_name", "ProductName", "string", rule="length(trim({})) > 0", expects="a product name"),
        Field("sales_datetime", "SalesDateTime", "timestamp"),
        Field("sales_amount", "SalesAmount", "decimal(12,2)", rule="{} > 0", expects="a positive amount"),
    ),
)
ROW_COLUMNS = ("shard_id", "sequence_number", "data", *ENVELOPE.columns, KIND, REASON)


@dataclass(frozen=True)
class SalesSettings:
    """The sales job's settings, validated once.

    Attributes:
        job: the common flags (source table, lake, checkpoint, trigger, endpoint, region).
        json_sink: also write silver rows as newline-delimited JSON under this URI.
        watermark_seconds: how far behind the newest sale a row may be before it is late; also the window in
            which a redelivered event_id is recognised as a duplicate.
        max_files_per_trigger: bronze files read per micro-batch at most.
    """

    job: JobSettings
    json_sink: str | None = None
    watermark_seconds: int = 600
    max_files_per_trigger: int = 1000

    def __post_init__(self) -> None:
        if self.watermark_seconds < 0:
            raise SettingsError(f"--watermark: expected seconds >= 0, found {self.watermark_seconds}.")
        check_max_files(self.max_files_per_trigger)

    @property
    def silver(self) -> str:
        return self.job.table(SILVER)

    @property
    def quarantine(self) -> str:
        return quarantine_table(self.job.lake, SILVER)

    @property
    def gold(self) -> str:
        return self.job.table(GOLD)

    @property
    def watermark(self) -> timedelta:
        return timedelta(seconds=self.watermark_seconds)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--json-sink", default=None, help="also write silver as JSON lines under this URI")
    parser.add_argument(
        "--watermark",
        type=int,
        default=600,
        metavar="SECONDS",
        help="lateness allowed behind the newest sale, and the duplicate window (default: %(default)s)",
    )
    add_max_files_argument(parser)


def settings_from_args(args: argparse.Namespace) -> SalesSettings:
    return SalesSettings(
        job=JobSettings(**common_settings(args)),
        json_sink=args.json_sink,
        watermark_seconds=args.watermark,
        max_files_per_trigger=args.max_files_per_trigger,
    )


def prepare(bronze: DataFrame) -> DataFrame:
    """Bronze rows -> classified rows with what the batch writer needs (payload bytes on invalid rows only)."""
    from pyspark.sql import functions as F

    classified = classify(bronze.select("data", "shard_id", "sequence_number"), ENVELOPE)
    payload = F.when(F.col(KIND) != VALID, F.col("data")).alias("data")
    return classified.select(
        "shard_id", "sequence_number", payload, *ENVELOPE.columns, F.col(KIND), F.col(REASON)
    )


# -- the stream: classified rows, and the first delivery of each event through Spark's state ------------

BRANCH = "_branch"
# The union's two branches: every bronze row (counts, quarantine), and the valid rows left after Spark's
# de-duplication state (silver, gold).
ALL, KEPT = "bronze", "kept"
_SEEN_AT = "_seen_at"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


def deduplicated(classified: DataFrame, window_seconds: int) -> DataFrame:
    """The classified stream with each row once, plus the first delivery of each valid event_id once.

    Spark's state keeps every event_id for ``window_seconds`` to twice that of processing time (the watermark is on the
    micro-batch's own timestamp): an event-time watermark would make the state operator drop late rows, and
    late rows belong in silver. Both branches read the same micro-batch, so the batch writer counts the bronze
    rows and the rows the state removed from one persisted batch.
    """
    from pyspark.sql import functions as F

    kept = (
        classified.filter(F.col(KIND) == VALID)
        .withColumn(_SEEN_AT, F.current_timestamp())
        .withWatermark(_SEEN_AT, f"{window_seconds} seconds")
        .dropDuplicatesWithinWatermark(["event_id"])
        .drop(_SEEN_AT)
        .withColumn(BRANCH, F.lit(KEPT))
    )
    return classified.withColumn(BRANCH, F.lit(ALL)).unionByName(kept)


def _silver_actions(silver: LakeTable) -> pa.Table | None:
    from deltalake import DeltaTable

    if not silver.exists():
        return None
    table = DeltaTable(silver.uri, storage_options=dict(silver.ref.storage_options) or None)
    return pa.table(table.get_add_actions(flatten=True))


def watermark_of(actions: pa.Table | None, delay: timedelta) -> datetime | None:
    """The newest sale in silver (from the files' statistics, no data read) less the delay."""
    if actions is None or "max.sales_datetime" not in actions.column_names or actions.num_rows == 0:
        return None
    newest = pc.max(actions["max.sales_datetime"]).as_py()
    return None if newest is None else newest - delay


def silver_rows(kept: DataFrame, now: datetime) -> DataFrame:
    """The kept rows in silver's shape (:data:`SILVER_SCHEMA`)."""
    from pyspark.sql import functions as F

    return kept.select(
        F.col("sales_id").cast("bigint"),
        F.col("product_name").cast("string"),
        F.col("sales_datetime").cast("timestamp"),
        F.col("sales_amount").cast("decimal(12,2)"),
        F.col("event_id").cast("string"),
        F.col("event_time").cast("timestamp"),
        F.lit(now).cast("timestamp").alias("event_processing_time"),
        F.col("shard_id").cast("string"),
        F.col("sequence_number").cast("string"),
    )


def late_flag(watermark: datetime | None) -> Column:
    """True on a row whose sale is before the watermark (nothing is late before silver has a sale)."""
    from pyspark.sql import functions as F

    if watermark is None:
        return F.lit(False)
    return F.coalesce(F.col("sales_datetime") < F.lit(watermark).cast("timestamp"), F.lit(False))


def gold_delta_rows(silver: DataFrame, watermark: datetime | None) -> DataFrame:
    """Revenue and sales per product and event-time minute of a batch's silver rows, late ones in ``late_*``
    (aggregated by the executors)."""
    from pyspark.sql import functions as F

    late = late_flag(watermark)
    amount = F.col("sales_amount").cast("decimal(18,2)")
    zero = F.lit(0).cast("decimal(18,2)")
    return silver.groupBy(
        F.col("product_name"), F.date_trunc("minute", F.col("sales_datetime")).alias("minute")
    ).agg(
        F.sum(F.when(late, zero).otherwise(amount)).cast("decimal(18,2)").alias("revenue"),
        F.sum(F.when(late, 0).otherwise(1)).cast("bigint").alias("sales"),
        F.sum(F.when(late, amount).otherwise(zero)).cast("decimal(18,2)").alias("late_revenue"),
        F.sum(F.when(late, 1).otherwise(0)).cast("bigint").alias("late_sales"),
    )


def json_lines(silver: DataFrame, batch_id: int) -> DataFrame:
    """Silver rows as JSON lines with the file each goes to (``event_date=/event_hour=/batch-<id>.json``)."""
    from pyspark.sql import functions as F

    line = F.to_json(
        F.struct(*[F.col(c) for c in silver.columns]),
        {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'", "timeZone": "UTC"},
    )
    with_line = silver.select(line.alias("line"))
    moment = F.get_json_object(F.col("line"), "$.event_time")
    name = F.concat(
        F.lit("event_date="),
        F.substring(moment, 1, 10),
        F.lit("/event_hour="),
        F.substring(moment, 12, 2),
        F.lit(f"/batch-{batch_id:010d}.json"),
    )
    return with_line.select(name.alias("name"), "line")


def _write_json_partition(sink: str, storage_options: dict[str, str]) -> Callable[[Iterator[Any]], None]:
    """The executor side of the JSON sink: each file of the partition written whole (a replay overwrites it)."""

    def write(rows: Iterator[Any]) -> None:
        from jobs.lake import with_retries

        files: dict[str, list[str]] = {}
        for row in rows:
            files.setdefault(row["name"], []).append(row["line"])
        if not files:
            return
        fs, root = filesystem_for(sink, storage_options)
        for name, lines in files.items():
            body = ("\n".join(lines) + "\n").encode()
            with_retries(functools.partial(write_file, fs, join(root, name), body), what=f"JSON file {name}")

    return write


# -- the batch writer ----------------------------------------------------------------------------------


class SalesBatchWriter:
    """The ``foreachBatch`` function of the sales query: silver written every batch, the other tables at most
    once per batch (see the module)."""

    def __init__(self, spark: SparkSession, settings: SalesSettings) -> None:
        from jobs.lake import spark_job_engine

        self.spark = spark
        self.settings = settings
        job = settings.job

        def table(uri: str) -> LakeTable:
            options = job.storage_options(uri)
            return spark_job_engine(spark, options).table(uri, storage_options=options)

        self.silver = table(settings.silver)
        self.quarantine = table(settings.quarantine)
        self.gold = table(settings.gold)
        from jobs.checkpoint import batches_to_retain

        self.metrics = job.batch_metrics(retain=batches_to_retain(spark))
        self._app_id: str | None = None

    def create_tables(self) -> None:
        """Create the three tables if they are missing, so readers find them before the first batch."""
        self.silver.create(SILVER_SCHEMA)
        self.quarantine.create(QUARANTINE_SCHEMA)
        self.gold.create(GOLD_SCHEMA)

    @property
    def app_id(self) -> str:
        if self._app_id is None:
            self._app_id = query_app_id(self.spark, self.settings.job.checkpoint, "sales")
        return self._app_id

    def _done(self, table: LakeTable, batch_id: int) -> bool:
        from jobs.lake import with_retries

        done = with_retries(
            lambda: table.transaction_version(self.app_id), what=f"transaction lookup on {table.uri}"
        )
        return done is not None and done >= batch_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from jobs.lake import rows_for

        started = time.perf_counter()
        if self._done(self.silver, batch_id):
            log.info("sales: batch %d skipped: already committed to %s", batch_id, self.silver.uri)
            return
        # Every output below reads this one computation of the batch (and of Spark's state).
        batch.persist()
        try:
            now = datetime.now(UTC)
            watermark = watermark_of(_silver_actions(self.silver), self.settings.watermark)
            silver = silver_rows(batch.filter(F.col(BRANCH) == KEPT), now)
            counts = self._counts(batch, watermark)
            bronze = batch.filter(F.col(BRANCH) == ALL)
            quarantine = quarantine_rows(bronze.select(*ROW_COLUMNS), batch_id, now=now)
            # Silver commits every batch (its transaction marks the batch done); the quarantine, gold and the JSON
            # sink only take a batch that has rows for them: an empty write still costs a Delta commit (a second
            # or more on two cores), and a replay of the batch finds the same nothing to write.
            if counts["quarantined"]:
                self._write(
                    batch_id,
                    "quarantine",
                    lambda: self.quarantine.append(
                        rows_for(self.quarantine, quarantine), app_id=self.app_id, batch_id=batch_id
                    ),
                )
            if counts["silver_rows"] and not self._done(self.gold, batch_id):
                self._merge_gold(gold_delta_rows(silver, watermark), batch_id, now)
            if self.settings.json_sink and counts["silver_rows"]:
                self._write_json(silver, batch_id)
            metrics = {
                "batch_id": batch_id,
                **counts,
                "watermark": None if watermark is None else watermark.isoformat(),
                "processed_at": now.isoformat(),
            }
            self.metrics.write(batch_id, metrics)
            self._write(
                batch_id,
                "silver",
                lambda: self.silver.append(
                    rows_for(self.silver, silver), app_id=self.app_id, batch_id=batch_id
                ),
            )
        finally:
            batch.unpersist()
        log.info(
            "sales: batch %d: %d bronze rows -> %d silver, %d quarantined, %d duplicates removed, %d other types, "
            "%d late; %.3fs",
            batch_id,
            counts["bronze_rows"],
            counts["silver_rows"],
            counts["quarantined"],
            counts["duplicates_removed"],
            counts["other_types"],
            counts["late"],
            time.perf_counter() - started,
        )

    @staticmethod
    def _counts(batch: DataFrame, watermark: datetime | None) -> dict[str, int]:
        """The batch's figures from one small aggregate (rows per branch, kind and lateness)."""
        from pyspark.sql import functions as F

        found = {
            (row[BRANCH], row[KIND], bool(row["late"])): int(row["count"])
            for row in batch.groupBy(F.col(BRANCH), F.col(KIND), late_flag(watermark).alias("late"))
            .count()
            .collect()
        }

        def total(branch: str, kind: str | None = None, late: bool | None = None) -> int:
            return sum(
                n
                for (b, k, is_late), n in found.items()
                if b == branch and (kind is None or k == kind) and (late is None or is_late == late)
            )

        kept = total(KEPT)
        return {
            "bronze_rows": total(ALL),
            "silver_rows": kept,
            "quarantined": total(ALL, INVALID),
            "duplicates_removed": total(ALL, VALID) - kept,
            "other_types": total(ALL, OTHER),
            "late": total(KEPT, late=True),
        }

    def _write(self, batch_id: int, what: str, write: Callable[[], Any]) -> Any:
        from jobs.lake import with_retries

        return with_retries(write, what=f"{what} of sales batch {batch_id}")

    def _merge_gold(self, delta: DataFrame, batch_id: int, now: datetime) -> None:
        if not self.gold.engine.accepts_frames:
            self._merge_gold_on_driver(delta, batch_id, now)
            return
        from delta.tables import DeltaTable

        from jobs.lake._jvm import _dml_settings, _session_settings

        deltas = ("revenue", "sales", "late_revenue", "late_sales")
        on = " AND ".join(f"t.{k} = s.{k}" for k in GOLD_KEYS)
        stamp = {
            "updated_batch": f"CAST({batch_id} AS BIGINT)",
            "updated_at": f"CAST('{now.isoformat()}' AS TIMESTAMP)",
        }
        added = {c: f"t.{c} + s.{c}" for c in deltas}
        inserted: dict[str, str | Column] = {**{c: f"s.{c}" for c in (*GOLD_KEYS, *deltas)}, **stamp}
        spark = delta.sparkSession

        def merge() -> None:
            target = DeltaTable.forPath(spark, self.gold.uri)
            merger = (
                target.alias("t")
                .merge(delta.alias("s"), on)
                .whenMatchedUpdate(set={**added, **stamp})
                .whenNotMatchedInsert(values=inserted)
            )
            with _session_settings(spark, _dml_settings(self.app_id, batch_id)):
                merger.execute()

        self._write(batch_id, "gold", merge)

    def _merge_gold_on_driver(self, delta_frame: DataFrame, batch_id: int, now: datetime) -> None:
        """Gold on the Azurite emulator (delta-rs): the batch's aggregate, a few rows per minute, is merged from
        the driver."""
        from deltalake import DeltaTable

        from jobs.lake import to_arrow

        delta = to_arrow(delta_frame).cast(pa.schema(list(GOLD_SCHEMA)[: len(GOLD_SCHEMA) - 2]))
        stored = GOLD_SCHEMA.empty_table()
        if delta.num_rows:
            earliest = pc.min(delta["minute"]).as_py()
            table = DeltaTable(self.gold.uri, storage_options=dict(self.gold.ref.storage_options) or None)
            stored = table.to_pyarrow_table(filters=[("minute", ">=", earliest)])
        updated = add_to_gold(stored, delta, batch_id=batch_id, now=now)
        self._write(
            batch_id,
            "gold",
            lambda: self.gold.merge(
                updated,
                keys=list(GOLD_KEYS),
                precombine="updated_batch",
                app_id=self.app_id,
                batch_id=batch_id,
            ),
        )

    def _write_json(self, silver: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        sink = self.settings.json_sink
        assert sink is not None
        # One task per file name, so each file is written whole by one executor.
        lines = json_lines(silver, batch_id).repartition(F.col("name"))
        lines.foreachPartition(_write_json_partition(sink, dict(self.settings.job.storage_options(sink))))


def read_totals(settings: SalesSettings) -> dict[str, int]:
    """The job's counts summed over every batch of its query (also those whose own files were pruned)."""
    return settings.job.batch_metrics().totals()


def read_metrics(settings: SalesSettings) -> list[dict[str, Any]]:
    """The per-batch figures the job wrote next to its checkpoint, oldest first."""
    return settings.job.batch_metrics().read_all()


def start(spark: SparkSession, settings: SalesSettings, *, bronze: DataFrame | None = None) -> StreamingQuery:
    """Create the tables, then start the sales query and return it (the caller waits on or stops it).

    Args:
        spark: the session.
        settings: the job's settings.
        bronze: the bronze stream to read (default: ``--source-table`` through the Delta reader).
    """
    job = settings.job
    writer = SalesBatchWriter(spark, settings)
    writer.create_tables()
    if bronze is None:
        bronze = read_bronze(spark, job, max_files_per_trigger=settings.max_files_per_trigger)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    log.info(
        "sales: %s -> %s, %s, %s%s; checkpoint %s, trigger %s",
        job.source_table,
        settings.silver,
        settings.quarantine,
        settings.gold,
        f", JSON {settings.json_sink}" if settings.json_sink else "",
        job.checkpoint,
        job.trigger,
    )
    from jobs.lake._jvm import _session_settings

    writer_stream = (
        deduplicated(prepare(bronze), settings.watermark_seconds)
        .writeStream.queryName("sales")
        .option("checkpointLocation", job.checkpoint)
        .foreachBatch(writer)
        .trigger(processingTime=job.interval)
    )
    # The de-duplication watermark moves with every batch's own timestamp, so Spark would follow each batch
    # with an empty one to expire state; expiring it at the next batch with rows is as good. The query takes
    # its settings when it starts, so the session (shared with other jobs in the demo) gets its own back.
    with _session_settings(spark, {NO_DATA_BATCHES: "false"}):
        return writer_stream.start()


def run(settings: SalesSettings, *, spark: SparkSession | None = None) -> int:
    """Run the job until it has processed everything (available-now) or is stopped. Returns an exit code.

    Raises:
        SettingsError: (or a subclass) from :func:`~jobs.pipelines._job.preflight`, before Spark starts.
    """
    from jobs.session import build_session

    if settings.json_sink:
        _check_json_sink(settings.json_sink)  # before the claim: a refused run records nothing
    preflight("sales", settings.job, tables=(SILVER, f"{SILVER}_quarantine", GOLD), spark=spark)
    session = spark or build_session("lakestack-sales")
    return run_until_done(start(session, settings), settings.job, name="sales")


def _check_json_sink(sink: str) -> None:
    # A local sink only: object stores have no folders to be files, and their access is the lake's.
    parsed = urlparse(sink)
    if parsed.scheme.lower() not in ("", "file"):
        return
    path = Path(parsed.path if parsed.scheme else sink).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SettingsError(
            f"--json-sink: cannot write JSON files under {sink}: {existing} is "
            f"{'a file' if not existing.is_dir() else 'not writable by this user'}. Point --json-sink at a "
            "folder this user may write."
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs sales",
        description=(
            "Read sales events from a bronze Delta table into silver `sales`, `sales_quarantine` and gold "
            "`sales_by_product_minute` under --lake, every row exactly once."
        ),
    )
    add_arguments(parser)
    return run(settings_from_args(parser.parse_args(argv)))


__all__ = [
    "ENVELOPE",
    "SalesSettings",
    "add_arguments",
    "main",
    "prepare",
    "read_metrics",
    "read_totals",
    "run",
    "settings_from_args",
    "start",
]
