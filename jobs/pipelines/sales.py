"""The `sales` job: bronze Delta table -> silver ``sales``, ``sales_quarantine``, gold ``sales_by_product_minute``
(and optionally the same silver rows as JSON files), every bronze row accounted for, exactly once.

    python -m jobs sales --source-table URI --lake URI --checkpoint PATH
        [--trigger available-now | processing-time=<N>s] [--endpoint-url URL] [--region R]
        [--json-sink URI] [--watermark SECONDS] [--max-files-per-trigger N] [--delta-reader auto|spark|python]

Spark 3.5-clean (it runs on Synapse): bronze comes through ``_job.read_bronze`` (Spark's own Delta source
there), a micro-batch's Arrow through ``jobs.lake.to_arrow``.

Per micro-batch: Spark classifies the bronze rows (``_envelope.classify``); the driver routes them in Arrow
(``_sales_route``): invalid rows to the quarantine, the first delivery of each event_id to silver (a
redelivery of an event silver already holds within the watermark is a duplicate, counted and dropped),
per product and event-time minute the revenue into gold by MERGE. Rows older than the watermark are late:
kept in silver, counted, and added to gold's ``late_*`` columns, not to its revenue.

Each table's commit carries the transaction (query id, batch id) and a replay skips tables that have it.
Silver is written last: it is the basis of de-duplication and of the watermark, so a replay after a crash
part-way through a batch sees silver as the first attempt did and routes the batch the same way.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs._files import filesystem_for, join
from jobs.errors import SettingsError
from jobs.pipelines._envelope import (
    KIND,
    QUARANTINE_SCHEMA,
    REASON,
    VALID,
    Envelope,
    Field,
    classify,
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
from jobs.pipelines._sales_route import (
    GOLD_KEYS,
    GOLD_SCHEMA,
    SILVER_SCHEMA,
    add_to_gold,
    dedup_cutoff,
    json_files,
    route,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
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


# -- the basis of a batch: silver as it stands before the batch ----------------------------------------


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


def seen_event_ids(
    silver: LakeTable, actions: pa.Table | None, candidates: Any, cutoff: datetime | None
) -> set[str]:
    """The candidate event ids silver already holds with an event time at or after ``cutoff``.

    Only files whose statistics reach the cutoff are read (silver grows in event-time order), and only the
    two columns needed.
    """
    if actions is None or actions.num_rows == 0 or cutoff is None or len(candidates) == 0:
        return set()
    newest = actions["max.event_time"] if "max.event_time" in actions.column_names else None
    paths = [
        str(path)
        for i, path in enumerate(actions["path"].to_pylist())
        if newest is None or newest[i].as_py() is None or newest[i].as_py() >= cutoff
    ]
    fs, root = filesystem_for(silver.uri, silver.ref.storage_options)
    wanted = pa.array(candidates, pa.string())
    seen: set[str] = set()
    for path in paths:
        ids = pq.read_table(join(root, path), columns=["event_id"], filesystem=fs)["event_id"]
        seen.update(str(i) for i in pc.filter(ids, pc.is_in(ids, value_set=wanted)).to_pylist())
    return seen


# -- the batch writer ----------------------------------------------------------------------------------


class SalesBatchWriter:
    """The ``foreachBatch`` function of the sales query: each table written once per batch (see the module)."""

    def __init__(self, spark: SparkSession, settings: SalesSettings) -> None:
        from jobs.lake import DeltaRsEngine

        self.spark = spark
        self.settings = settings
        job = settings.job
        engine = DeltaRsEngine()
        self.silver = engine.table(settings.silver, storage_options=job.storage_options(settings.silver))
        self.quarantine = engine.table(
            settings.quarantine, storage_options=job.storage_options(settings.quarantine)
        )
        self.gold = engine.table(settings.gold, storage_options=job.storage_options(settings.gold))
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
        started = time.perf_counter()
        if self._done(self.silver, batch_id):
            log.info("sales: batch %d skipped: already committed to %s", batch_id, self.silver.uri)
            return
        from jobs.lake import to_arrow

        rows = to_arrow(batch.select(*ROW_COLUMNS))
        now = datetime.now(UTC)
        actions = _silver_actions(self.silver)
        watermark = watermark_of(actions, self.settings.watermark)
        valid = rows.filter(pc.equal(rows[KIND], pa.scalar(VALID)))
        cutoff = dedup_cutoff(valid, self.settings.watermark)
        seen = seen_event_ids(self.silver, actions, valid["event_id"].unique(), cutoff)
        routed = route(rows, seen=seen, watermark=watermark, batch_id=batch_id, now=now)
        self._write(
            batch_id,
            "quarantine",
            lambda: self.quarantine.append(routed.quarantine, app_id=self.app_id, batch_id=batch_id),
        )
        if not self._done(self.gold, batch_id):
            self._merge_gold(routed.gold_delta, batch_id, now)
        if self.settings.json_sink:
            self._write_json(routed.silver, batch_id)
        metrics = {
            "batch_id": batch_id,
            **routed.counts,
            "watermark": None if watermark is None else watermark.isoformat(),
            "processed_at": now.isoformat(),
        }
        self.metrics.write(batch_id, metrics)
        self._write(
            batch_id,
            "silver",
            lambda: self.silver.append(routed.silver, app_id=self.app_id, batch_id=batch_id),
        )
        log.info(
            "sales: batch %d: %d bronze rows -> %d silver, %d quarantined, %d duplicates removed, %d other types, "
            "%d late; %.3fs",
            batch_id,
            routed.counts["bronze_rows"],
            routed.counts["silver_rows"],
            routed.counts["quarantined"],
            routed.counts["duplicates_removed"],
            routed.counts["other_types"],
            routed.counts["late"],
            time.perf_counter() - started,
        )

    def _write(self, batch_id: int, what: str, write: Callable[[], Any]) -> Any:
        from jobs.lake import with_retries

        return with_retries(write, what=f"{what} of sales batch {batch_id}")

    def _merge_gold(self, delta: pa.Table, batch_id: int, now: datetime) -> None:
        from deltalake import DeltaTable

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

    def _write_json(self, silver: pa.Table, batch_id: int) -> None:
        import pyarrow.fs as pafs

        sink = self.settings.json_sink
        assert sink is not None
        fs, root = filesystem_for(sink, self.settings.job.storage_options(sink))
        for name, body in json_files(silver, batch_id).items():
            path = join(root, name)
            if isinstance(fs, pafs.LocalFileSystem):
                fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            self._write(batch_id, f"JSON file {name}", _put(fs, path, body))


def _put(fs: Any, path: str, body: bytes) -> Callable[[], None]:
    def put() -> None:
        with fs.open_output_stream(path) as out:
            out.write(body)

    return put


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
    return (
        prepare(bronze)
        .writeStream.queryName("sales")
        .option("checkpointLocation", job.checkpoint)
        .foreachBatch(writer)
        .trigger(processingTime=job.interval)
        .start()
    )


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
