"""The ``orders`` job: CDC events from bronze -> orders tables, copy-on-write or merge-on-read.

``python -m jobs orders --layout cow|mor --source-table URI --lake URI --checkpoint PATH
[--trigger available-now | processing-time=<N>s] [--compact-every N] [--tombstone-retention 7d]
[--delta-reader auto|spark|python]``, and ``python -m jobs orders --layout mor --lake URI --compact`` (merge
every pending change into the base, exit).

Spark 3.5-clean (it runs on Synapse): bronze comes through ``jobs.sources.read_delta_stream`` (Spark's own
Delta source there). Every row stays on the executors: the layouts are written by delta-spark
(``_orders_spark``); the driver reads small aggregates. Only tables on the Azurite emulator (no Hadoop file
system reaches it) are written by delta-rs from the driver, the batch's changes brought there by
``jobs.lake.to_arrow`` (``_orders_tables``' Arrow writers).

Each micro-batch of bronze rows is classified by the shared envelope (contract C1): the orders' own events
are parsed with an explicit schema, malformed rows go to ``orders_quarantine`` (C2), other scenarios'
events are counted and skipped. The changes then go to the layout (``_orders_tables``):

- ``cow``: one MERGE into ``orders`` per micro-batch (latest ``order_ts`` wins, deletes remove rows and
  leave a tombstone in ``orders_tombstones``), pruned to the ``order_bucket`` partitions the batch touches;
- ``mor``: one append to ``orders_changes`` per micro-batch; every N change commits, the same
  ``foreachBatch`` then runs compaction as a Spark job (a MERGE of the pending log into ``orders_base`` on the
  executors); ``--compact`` runs it from anywhere.

Reads: :func:`snapshot` (current orders, either layout, optionally as of a version) and
:func:`read_optimized` (mor's base alone: fast, and stale by the changes not yet compacted).
Every table write carries the micro-batch's transaction id, so a restart or a kill mid-batch replays the
batch without applying anything twice.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import pyarrow as pa
import pyarrow.compute as pc

from jobs._options import parse_duration, parse_trigger
from jobs._run import stop_and_raise, stop_on_signals, wait_for_query
from jobs.errors import SettingsError
from jobs.lake import LakeTable, rows_for, scoped_storage_options, spark_job_engine, to_arrow, with_retries
from jobs.pipelines._cdc import CHANGE_SCHEMA
from jobs.pipelines._envelope import (
    INVALID,
    KIND,
    OTHER,
    QUARANTINE_SCHEMA,
    VALID,
    Envelope,
    Field,
    classify,
    quarantine_rows,
)
from jobs.pipelines._job import (
    JobSettings,
    add_common_arguments,
    add_max_files_argument,
    check_delta_reader,
    check_max_files,
    common_settings,
    preflight,
    query_app_id,
    read_bronze,
)
from jobs.pipelines._orders_spark import SparkCompactor, SparkCowWriter, SparkMorWriter
from jobs.pipelines._orders_tables import (
    DEFAULT_TOMBSTONE_RETENTION,
    LAYOUTS,
    BatchOutcome,
    CompactionOutcome,
    CompactionStatus,
    Compactor,
    CowWriter,
    Layout,
    MorWriter,
    OrdersTables,
    read_base,
    read_snapshot,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    # A micro-batch's parsed changes as the layout writers and ``on_batch`` get them: a DataFrame (delta-spark
    # writers, rows on the executors), or an Arrow table on the driver (delta-rs writers, tables on Azurite).
    Changes: TypeAlias = pa.Table | DataFrame
    Writer: TypeAlias = CowWriter | MorWriter | SparkCowWriter | SparkMorWriter

log = logging.getLogger(__name__)

# What the orders pipeline reads from each event (its explicit schema; anything else is quarantined).
ORDERS_ENVELOPE = Envelope(
    "orders",
    (
        Field("change_id", "change_id", "bigint", rule="{} > 0", expects="a positive change id"),
        Field(
            "op",
            "op",
            "string",
            rule="{} IN ('insert', 'update', 'delete')",
            expects="insert, update or delete",
        ),
        Field("order_id", "order_id", "string", rule="length(trim({})) > 0", expects="a non-empty order id"),
        Field("order_ts", "order_ts", "timestamp"),
        Field("customer_id", "customer_id", "string"),
        Field("amount", "amount", "double", rule="{} >= 0", expects="an amount of 0 or more"),
        Field("status", "status", "string", rule="length(trim({})) > 0", expects="a non-empty status"),
    ),
)
DEFAULT_COMPACT_EVERY = 5


@dataclass(frozen=True)
class OrdersSettings:
    """Everything the orders job needs, validated once at start-up.

    Attributes:
        layout: ``cow`` (MERGE per micro-batch) or ``mor`` (change log + compaction).
        lake: the lake root; the tables are ``<lake>/orders`` etc.
        source_table: the bronze Delta table (not needed with ``compact_only``).
        checkpoint: the query's checkpoint (not needed with ``compact_only``).
        trigger: ``available-now`` or ``processing-time=<N>s``.
        compact_every: mor: compact after this many change commits (0: never in this job).
        compact_only: mor: merge every pending change into the base and exit (no stream).
        tombstone_retention: how long a deleted order's tombstone is kept.
        max_files_per_trigger: bronze files per micro-batch, at most.
        delta_reader: how bronze is read (``jobs.sources.read_delta_stream``'s ``reader``): ``auto``, ``spark``
            (Spark's own Delta source, Synapse) or ``python`` (the kit's source, Spark 4).
    """

    layout: Layout
    lake: str
    source_table: str | None = None
    checkpoint: str | None = None
    trigger: str = "processing-time=5s"
    endpoint_url: str | None = None
    region: str | None = None
    compact_every: int = DEFAULT_COMPACT_EVERY
    compact_only: bool = False
    tombstone_retention: timedelta = DEFAULT_TOMBSTONE_RETENTION
    max_files_per_trigger: int = 1000
    delta_reader: str = "auto"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise SettingsError(f"--layout: expected one of {', '.join(LAYOUTS)}, found {self.layout!r}.")
        if not self.lake:
            raise SettingsError(
                "--lake: expected the lake root URI (a path, s3://..., abfss://...), found nothing."
            )
        if self.compact_only:
            if self.layout != "mor":
                raise SettingsError(
                    "--compact: only the mor layout has a change log to compact; found --layout cow. "
                    "For file compaction of any table use `python -m jobs maintenance`."
                )
        else:
            for flag, value in (("--source-table", self.source_table), ("--checkpoint", self.checkpoint)):
                if not value:
                    raise SettingsError(
                        f"{flag}: expected a URI or path, found nothing (needed unless --compact)."
                    )
        self._check_stream_options()

    def _check_stream_options(self) -> None:
        parse_trigger(self.trigger)
        if self.compact_every < 0:
            raise SettingsError(
                f"--compact-every: expected a whole number of change commits, 0 or more, found {self.compact_every}."
            )
        if self.tombstone_retention <= timedelta(0):
            raise SettingsError(
                f"--tombstone-retention: expected a positive duration, found {self.tombstone_retention}."
            )
        check_max_files(self.max_files_per_trigger)
        check_delta_reader(self.delta_reader)

    @property
    def available_now(self) -> bool:
        return parse_trigger(self.trigger) is None

    def options_for(self, uri: str) -> dict[str, str]:
        # The endpoint and region describe the emulator's (or AWS's) S3; they mean nothing to other stores.
        return scoped_storage_options(uri, endpoint_url=self.endpoint_url, region=self.region)

    def tables(self) -> OrdersTables:
        return OrdersTables(self.lake, self.options_for(self.lake))

    @property
    def job(self) -> JobSettings:
        """The flags every pipeline shares, for the shared checks (a streaming run's: not with ``--compact``)."""
        assert self.source_table is not None and self.checkpoint is not None  # validated unless compact_only
        return JobSettings(
            source_table=self.source_table,
            lake=self.lake,
            checkpoint=self.checkpoint,
            trigger=self.trigger,
            endpoint_url=self.endpoint_url,
            region=self.region,
            delta_reader=self.delta_reader,
        )

    @property
    def table_names(self) -> tuple[str, ...]:
        """The tables this layout writes under ``--lake``."""
        names = ("orders", "orders_tombstones") if self.layout == "cow" else ("orders_base", "orders_changes")
        return (*names, "orders_quarantine")


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch, as the job saw it (what a monitor or the demo's report is built from).

    Attributes:
        batch_id: the micro-batch.
        bronze_rows: rows read from bronze; quarantined / other_types: of those, malformed / not orders.
        change_bytes: payload bytes of the batch's orders changes (what write amplification is relative to).
        read_s: seconds Spark took to read and classify the batch (before any table write).
        outcomes: per layout, what it wrote (changes, repeats dropped, late changes, timing).
        latencies_s: per layout, per change, seconds from its ``event_time`` to the batch being readable.
    """

    batch_id: int
    bronze_rows: int
    quarantined: int
    other_types: int
    change_bytes: int
    read_s: float
    outcomes: Mapping[Layout, BatchOutcome]
    latencies_s: Mapping[Layout, tuple[float, ...]]

    @property
    def outcome(self) -> BatchOutcome:
        """The outcome of the (first) layout."""
        return next(iter(self.outcomes.values()))


class CompactionCadence:
    """Runs mor compaction after every ``every`` change commits, in the query's ``foreachBatch``, after the
    batch's append: the compaction is a Spark job (its rows on the executors), the stream's next micro-batch
    starts when it is done, and the two never race on a table (the append writes the log, compaction the base).

    A failed compaction is logged and tried again at the next commit; the stream goes on.
    """

    def __init__(self, every: int, compactor: Callable[[], Compactor | SparkCompactor]) -> None:
        self.every = every
        self.outcomes: list[CompactionOutcome] = []
        self.failures: list[BaseException] = []
        self._make = compactor
        self._compactor: Compactor | SparkCompactor | None = None
        self._pending: int | None = None

    def committed(self) -> None:
        """Count one change commit; compact when ``every`` are pending (counting those before this run)."""
        if self._compactor is None:
            self._compactor = self._make()
            # The commit just made is among the pending ones the status counts.
            self._pending = self._compactor.status().pending_commits
        else:
            self._pending = (self._pending or 0) + 1
        if self._pending < self.every:
            return
        try:
            self.outcomes.append(self._compactor.run())
            self._pending = 0
        except Exception as error:  # the stream must go on; the next commit tries again
            log.error("orders: compaction failed (the stream goes on; retried at the next commit): %s", error)
            self.failures.append(error)

    def close(self) -> None:
        """Nothing runs between batches: kept so a caller may close the job the same way either way."""


class OrdersJob:
    """The query's driver side: classify each micro-batch, quarantine, apply the changes, compact (mor).

    ``layouts`` (default: the settings' one) lets one query feed both layouts from the same micro-batches,
    written side by side in two threads: how ``lakestack demo`` compares them on one stream.
    """

    def __init__(
        self,
        settings: OrdersSettings,
        *,
        layouts: Sequence[Layout] | None = None,
        on_batch: Callable[[BatchReport, Changes], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.layouts: tuple[Layout, ...] = tuple(layouts or (settings.layout,))
        # For readers (reports, the demo's checks): delta-rs, no Spark needed.
        self.tables = settings.tables()
        self.on_batch = on_batch
        self.reports: list[BatchReport] = []
        self._clock = clock
        self._writers: dict[Layout, Writer] = {}
        self._app_id: str | None = None
        self._spark: SparkSession | None = None
        self._on_spark: bool | None = None
        self._pool = ThreadPoolExecutor(max_workers=len(self.layouts), thread_name_prefix="orders-write")
        self.compaction: CompactionCadence | None = None
        if "mor" in self.layouts and settings.compact_every > 0:
            self.compaction = CompactionCadence(settings.compact_every, self._compactor)

    def _writing_tables(self, spark: SparkSession) -> tuple[OrdersTables, bool]:
        """The tables bound to the engine the job writes them with, and whether that is delta-spark."""
        options = dict(self.tables.storage_options)
        engine = spark_job_engine(spark, options)
        return OrdersTables(self.settings.lake, options, engine=engine), engine.accepts_frames

    def _compactor(self) -> Compactor | SparkCompactor:
        assert self._spark is not None  # made at the first change commit, inside a batch
        tables, on_spark = self._writing_tables(self._spark)
        retention = self.settings.tombstone_retention
        if on_spark:
            return SparkCompactor(self._spark, tables, tombstone_retention=retention, clock=self._clock)
        return Compactor(tables, tombstone_retention=retention, clock=self._clock)

    def _writer_for(self, layout: Layout, app_id: str, spark: SparkSession) -> Writer:
        if layout not in self._writers:
            tables, on_spark = self._writing_tables(spark)
            retention = self.settings.tombstone_retention
            writer: Writer
            if layout == "cow":
                kind = SparkCowWriter if on_spark else CowWriter
                writer = kind(tables, app_id=app_id, tombstone_retention=retention, clock=self._clock)
            else:
                writer = (SparkMorWriter if on_spark else MorWriter)(tables, app_id=app_id)
            self._writers[layout] = writer
        return self._writers[layout]

    def write_batch(self, app_id: str, bronze: DataFrame, batch_id: int) -> BatchReport:
        """Apply one micro-batch exactly once (the ``foreachBatch`` body).

        The classified batch is computed once (persisted); its figures come from Spark aggregates, and every
        table is written by the executors (delta-spark): quarantine, the layouts' MERGE or append, compaction.
        The driver gets counts, the buckets a MERGE touches and a sample of event times (for latency). On the
        Azurite emulator (delta-rs) the parsed changes are brought to the driver for the Arrow writers.
        """
        from pyspark.sql import functions as F

        started = time.perf_counter()
        spark = bronze.sparkSession
        self._spark = spark
        if self._on_spark is None:
            self._on_spark = self._writing_tables(spark)[1]
        classified = classify(bronze, ORDERS_ENVELOPE)
        classified.persist()
        try:
            counts = _batch_counts(classified)
            read_s = time.perf_counter() - started
            if counts.quarantined:
                self._quarantine(classified, app_id=app_id, batch_id=batch_id)
            valid = classified.filter(F.col(KIND) == VALID).select(*CHANGE_SCHEMA.names)
            changes: Changes
            if self._on_spark:
                changes, event_times = valid, _event_time_sample(valid)
            else:
                changes = to_arrow(valid).cast(CHANGE_SCHEMA)
                micros = pc.drop_null(pc.cast(changes["event_time"], pa.int64())).to_numpy(
                    zero_copy_only=False
                )
                event_times = [float(t) / 1e6 for t in micros]
            # Each layout writes its own tables with its own transaction ids: a failure in one is raised after
            # the other finished, and Spark's replay then skips what already landed.
            futures = {
                layout: self._pool.submit(self._writer_for(layout, app_id, spark).write, changes, batch_id)  # type: ignore[arg-type]
                for layout in self.layouts
            }
            outcomes = {layout: future.result() for layout, future in futures.items()}
            if self.compaction is not None and outcomes["mor"].committed:
                self.compaction.committed()
            report = BatchReport(
                batch_id=batch_id,
                bronze_rows=counts.bronze_rows,
                quarantined=counts.quarantined,
                other_types=counts.other_types,
                change_bytes=counts.change_bytes,
                read_s=read_s,
                outcomes=outcomes,
                latencies_s={
                    layout: tuple(outcome.visible_at - t for t in event_times)
                    for layout, outcome in outcomes.items()
                },
            )
            self._log(report)
            self.reports.append(report)
            if self.on_batch is not None:
                self.on_batch(report, changes)
        finally:
            classified.unpersist()
        return report

    @staticmethod
    def _log(report: BatchReport) -> None:
        for layout, outcome in report.outcomes.items():
            log.info(
                "orders %s: batch %d: %d bronze rows (read in %.3fs) -> %d changes (%d repeats dropped, "
                "%d late), %d quarantined, %d other types, %s in %.3fs",
                layout,
                report.batch_id,
                report.bronze_rows,
                report.read_s,
                outcome.changes,
                outcome.duplicates,
                outcome.late,
                report.quarantined,
                report.other_types,
                "committed" if outcome.committed else "already committed: skipped",
                outcome.write_s,
            )

    def _quarantine(self, classified: DataFrame, *, app_id: str, batch_id: int) -> None:
        """Append the batch's malformed rows to ``orders_quarantine``, written by the executors."""
        uri = self.tables.quarantine.uri
        options = dict(self.tables.storage_options)
        table = spark_job_engine(classified.sparkSession, options).table(uri, storage_options=options)
        bad = quarantine_rows(classified, batch_id, now=self._clock())
        rows = rows_for(table, bad)
        with_retries(
            lambda: _append(table, rows, app_id=app_id, batch_id=batch_id),
            what=f"quarantine of batch {batch_id} in {uri}",
        )

    def start(self, spark: SparkSession, *, bronze: DataFrame | None = None) -> StreamingQuery:
        """Start the streaming query (the caller waits on or stops it, then calls :meth:`close`).

        Args:
            spark: the session.
            bronze: the bronze stream to read (default: ``--source-table`` through the Delta reader
                ``--delta-reader`` picks).
        """
        from jobs.checkpoint import batches_to_retain

        settings = self.settings
        if bronze is None:
            bronze = read_bronze(spark, settings.job, max_files_per_trigger=settings.max_files_per_trigger)
        metrics = settings.job.batch_metrics(retain=batches_to_retain(spark))

        def write(batch: DataFrame, batch_id: int) -> None:
            if self._app_id is None:
                pipeline = f"orders-{'-'.join(self.layouts)}"
                self._app_id = query_app_id(spark, settings.checkpoint or "", pipeline)
            report = self.write_batch(self._app_id, batch, batch_id)
            # After the tables' commits and before Spark's: a replay (every write skipped) writes it again, so
            # each committed batch has its one file, which is what a monitor (the demo's drain line) sums.
            metrics.write(batch_id, _metrics(report))

        interval = parse_trigger(settings.trigger)
        writer = (
            bronze.writeStream.queryName(f"orders-{'-'.join(self.layouts)}")
            .option("checkpointLocation", settings.checkpoint)
            .foreachBatch(write)
        )
        if interval is not None:
            writer = writer.trigger(processingTime=f"{interval:g} seconds")
        log.info(
            "orders %s: %s -> %s, checkpoint %s, trigger %s%s",
            " + ".join(self.layouts),
            settings.source_table,
            settings.lake,
            settings.checkpoint,
            settings.trigger,
            f", compaction every {settings.compact_every} change commits" if self.compaction else "",
        )
        return writer.start()

    def close(self) -> None:
        """Release the writer threads."""
        if self.compaction is not None:
            self.compaction.close()
        self._pool.shutdown(wait=True)


def _metrics(report: BatchReport) -> dict[str, Any]:
    """A batch's figures for ``BatchMetrics`` (the layouts see the same changes: the first one's counts)."""
    return {
        "batch_id": report.batch_id,
        "bronze_rows": report.bronze_rows,
        "quarantined": report.quarantined,
        "other_types": report.other_types,
        "change_bytes": report.change_bytes,
        "changes": report.outcome.changes,
        "duplicates_removed": report.outcome.duplicates,
        "late": report.outcome.late,
    }


# Per batch, at most this many evenly spaced quantiles of the changes' event times reach the driver (the
# latency figures' sample): a batch of up to this many changes is represented change by change.
LATENCY_SAMPLE = 1000


def _event_time_sample(changes: DataFrame) -> list[float]:
    """Up to ``LATENCY_SAMPLE`` evenly spaced quantiles of the changes' event times (epoch seconds), from one
    aggregate: one per change when the batch has that many or fewer."""
    from pyspark.sql import functions as F

    seconds = F.expr("unix_micros(event_time)") / F.lit(1e6)
    row = changes.agg(F.count(seconds).alias("n")).first()
    n = 0 if row is None else int(row["n"])
    if n == 0:
        return []
    points = min(n, LATENCY_SAMPLE)
    fractions = [i / (points - 1) if points > 1 else 0.5 for i in range(points)]
    found = changes.agg(F.percentile_approx(seconds, fractions, 100_000).alias("q")).first()
    return [] if found is None or found["q"] is None else [float(q) for q in found["q"]]


@dataclass(frozen=True)
class _BatchCounts:
    bronze_rows: int
    quarantined: int
    other_types: int
    change_bytes: int


def _batch_counts(classified: DataFrame) -> _BatchCounts:
    """A classified batch's figures from one Spark aggregate (rows per kind, the orders' payload bytes)."""
    from pyspark.sql import functions as F

    kind = F.col(KIND)
    row = classified.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(kind == INVALID, 1)).alias("invalid"),
        F.count(F.when(kind == OTHER, 1)).alias("other"),
        F.sum(F.when(kind == VALID, F.expr("octet_length(data)"))).alias("bytes"),
    ).first()
    assert row is not None  # a global aggregate always has its one row
    return _BatchCounts(
        bronze_rows=int(row["rows"]),
        quarantined=int(row["invalid"]),
        other_types=int(row["other"]),
        change_bytes=int(row["bytes"] or 0),
    )


def _append(table: LakeTable, rows: pa.Table | DataFrame, *, app_id: str, batch_id: int) -> None:
    if not table.exists():
        table.create(QUARANTINE_SCHEMA)
    table.append(rows, app_id=app_id, batch_id=batch_id)


# -- reads -------------------------------------------------------------------------------------------------------


@overload
def snapshot(spark: None, layout: Layout, tables: OrdersTables, version: int | None = None) -> pa.Table: ...


@overload
def snapshot(
    spark: SparkSession, layout: Layout, tables: OrdersTables, version: int | None = None
) -> DataFrame: ...


def snapshot(
    spark: SparkSession | None, layout: Layout, tables: OrdersTables, version: int | None = None
) -> pa.Table | DataFrame:
    """The current orders: every change applied, deleted orders gone; the same rows for either layout.

    Args:
        spark: a session to get a Spark DataFrame, or None for a ``pyarrow.Table`` (no Spark needed).
        layout: ``cow`` reads ``orders``; ``mor`` reads ``orders_base`` plus the changes in
            ``orders_changes`` not yet compacted (deletes applied, tombstones honoured).
        tables: the lake's orders tables, ``OrdersTables(lake_uri, storage_options)``.
        version: time travel: a version of ``orders`` (cow) or of ``orders_changes`` (mor).

    Returns:
        Columns ``order_id, order_ts, customer_id, amount, status, order_date``, one row per order, sorted
        by ``order_id``.
    """
    rows = read_snapshot(tables, layout, version=version)
    return rows if spark is None else spark.createDataFrame(rows)


@overload
def read_optimized(spark: None, tables: OrdersTables) -> pa.Table: ...


@overload
def read_optimized(spark: SparkSession, tables: OrdersTables) -> DataFrame: ...


def read_optimized(spark: SparkSession | None, tables: OrdersTables) -> pa.Table | DataFrame:
    """mor's read-optimized read: ``orders_base`` alone, tombstones hidden.

    STALE by design: changes appended since the last compaction are not in it (``compaction_status``
    says how many change commits behind it is). Same columns as :func:`snapshot`.
    """
    rows = read_base(tables)
    return rows if spark is None else spark.createDataFrame(rows)


def compaction_status(tables: OrdersTables) -> CompactionStatus:
    """How far mor compaction got: the last ``log_seq`` merged, the log's latest, commits pending."""
    return Compactor(tables).status()


def compact(
    tables: OrdersTables,
    *,
    spark: SparkSession | None = None,
    tombstone_retention: timedelta = DEFAULT_TOMBSTONE_RETENTION,
) -> CompactionOutcome:
    """Merge every pending change into ``orders_base`` now (safe beside the running stream).

    With a session it is a Spark job written by delta-spark, as the job's own compactions are (one kind of
    writer per table); without one (or for tables on Azurite), delta-rs on this process.
    """
    if spark is not None:
        options = dict(tables.storage_options)
        engine = spark_job_engine(spark, options)
        if engine.accepts_frames:
            bound = OrdersTables(tables.lake, options, engine=engine)
            return SparkCompactor(spark, bound, tombstone_retention=tombstone_retention).run()
    return Compactor(tables, tombstone_retention=tombstone_retention).run()


# -- command line --------------------------------------------------------------------------------------------------


def run(settings: OrdersSettings, *, spark: SparkSession | None = None) -> int:
    """Run the job until it drains (available-now) or is stopped by SIGINT/SIGTERM; or compact and exit.

    Raises:
        SettingsError: (or a subclass) before Spark starts (:func:`~jobs.pipelines._job.preflight`), or before
            a compaction: no change log under ``--lake``.
    """
    from jobs.session import build_session

    if settings.compact_only:
        _check_compactable(settings)
        # A Spark job, so the base keeps one kind of writer (the stream's compactions are delta-spark's).
        session = spark or build_session("lakestack-orders-compact")
        outcome = compact(settings.tables(), spark=session, tombstone_retention=settings.tombstone_retention)
        status = compaction_status(settings.tables())
        log.info(
            "orders mor: compaction %s: base merged through log_seq %d (log at %d, %d commits pending)",
            f"merged {outcome.changes} changes" if outcome.committed else "found nothing to merge",
            status.merged_through,
            status.latest,
            status.pending_commits,
        )
        return 0
    # The layout is part of the owner: cow's and mor's tables remember different transactions.
    preflight(f"orders --layout {settings.layout}", settings.job, tables=settings.table_names, spark=spark)
    session = spark or build_session(f"lakestack-orders-{settings.layout}")
    job = OrdersJob(settings)
    query = job.start(session)
    with stop_on_signals(log, "orders") as stop_requested:
        try:
            if settings.available_now:
                # Python sources run one batch under Trigger.AvailableNow in Spark 4.0 and 4.1: drain with
                # back-to-back batches instead, then stop.
                query.processAllAvailable()
            else:
                wait_for_query(query, stop_requested, available_now=False)
            stop_and_raise(query)
        finally:
            job.close()
    log.info(
        "orders %s: stopped after %d micro-batches; the next run resumes from %s",
        settings.layout,
        len(job.reports),
        settings.checkpoint,
    )
    return 0


def _check_compactable(settings: OrdersSettings) -> None:
    # Without this a mistyped --lake "compacts" nothing and exits 0, as if all were well.
    from jobs.lake import check_table_readable, check_table_writable

    tables = settings.tables()
    changes, base = tables.changes.uri, tables.base.uri
    check_table_readable(changes, storage_options=settings.options_for(changes), flag="--lake")
    check_table_writable(base, storage_options=settings.options_for(base), flag="--lake")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The orders job's flags (contract C3 plus the pipeline's own)."""
    parser.add_argument(
        "--layout", required=True, choices=LAYOUTS, help="cow (MERGE each batch) or mor (change log)"
    )
    # Not required by the parser: --compact runs no stream (OrdersSettings requires them otherwise).
    add_common_arguments(parser, stream_required=False)
    parser.add_argument(
        "--compact-every",
        type=int,
        default=DEFAULT_COMPACT_EVERY,
        metavar="N",
        help="mor: compact after N change commits, beside the stream; 0: never in this job (default: %(default)s)",
    )
    parser.add_argument(
        "--compact", action="store_true", help="mor: merge every pending change into orders_base, then exit"
    )
    parser.add_argument(
        "--tombstone-retention",
        default="7d",
        metavar="DURATION",
        help="keep a deleted order's tombstone this long (default: %(default)s)",
    )
    add_max_files_argument(parser)


def settings_from_args(args: argparse.Namespace) -> OrdersSettings:
    return OrdersSettings(
        layout=args.layout,
        **common_settings(args),
        compact_every=args.compact_every,
        compact_only=args.compact,
        tombstone_retention=parse_duration(args.tombstone_retention, name="--tombstone-retention"),
        max_files_per_trigger=args.max_files_per_trigger,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs orders",
        description="Apply order CDC events from a bronze Delta table to copy-on-write or merge-on-read "
        "orders tables, exactly once.",
    )
    add_arguments(parser)
    return run(settings_from_args(parser.parse_args(argv)))


__all__ = [
    "LAYOUTS",
    "ORDERS_ENVELOPE",
    "BatchReport",
    "CompactionCadence",
    "Layout",
    "OrdersJob",
    "OrdersSettings",
    "OrdersTables",
    "add_arguments",
    "compact",
    "compaction_status",
    "main",
    "read_optimized",
    "run",
    "settings_from_args",
    "snapshot",
]
