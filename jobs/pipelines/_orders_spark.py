"""The orders layouts written by delta-spark: every row stays on the executors.

The same rules as the Arrow writers of ``_orders_tables`` (``_cdc``: a repeated delivery counts once, per order
the latest ``order_ts`` wins, then the higher ``change_id``; a delete leaves a tombstone), expressed as Spark
transforms of the micro-batch's parsed changes. The driver plans, commits, and reads small aggregates (counts,
the at most ``ORDER_BUCKETS`` buckets a batch touches, the latest ``log_seq``).

- cow: one distributed MERGE into ``orders`` per micro-batch (``DeltaTable.merge``). ``orders`` is partitioned
  by ``order_bucket`` and the MERGE condition names the buckets the batch touches as literals, so Delta reads
  and rewrites the files of those partitions only, not the table. Tombstones are upserted first by a MERGE
  into ``orders_tombstones``.
- mor: one append to ``orders_changes`` per micro-batch (``DataFrame.write``), and the compaction
  (:class:`SparkCompactor`): one MERGE of the pending log's winners into ``orders_base``, partitioned and
  pruned by bucket like ``orders``.

Every commit carries the transaction (app id, batch id; for compaction the last ``log_seq`` it merged), which
Delta records and a replay finds, so a replayed batch writes nothing twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobs._retry import RetryPolicy
from jobs.lake import with_retries
from jobs.pipelines._cdc import (
    BUCKET_COLUMN,
    CHANGE_SCHEMA,
    DELETE_FLAG,
    IS_DELETED,
    LOG_SEQ,
    ORDER_BUCKETS,
    ORDER_COLUMNS,
    PARTITION_COLUMN,
)
from jobs.pipelines._orders_tables import (
    COMPACTION_APP_ID,
    DEFAULT_TOMBSTONE_RETENTION,
    BatchOutcome,
    CompactionOutcome,
    CompactionStatus,
    Compactor,
    CowTablesWriter,
    MorLogWriter,
    OrdersStateError,
    OrdersTables,
    merged_through,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

_MICROS_PER_DAY = 86_400_000_000


def utc_date(column: str) -> Column:
    """The UTC date of a timestamp column, whatever the session's time zone (``to_date`` follows it)."""
    from pyspark.sql import functions as F

    return F.expr(f"date_from_unix_date(CAST(floor(unix_micros({column}) / {_MICROS_PER_DAY}) AS INT))")


def bucket_of(column: str) -> Column:
    """``_cdc.order_bucket`` in Spark: crc32 of the id's UTF-8 bytes, modulo ``ORDER_BUCKETS``."""
    from pyspark.sql import functions as F

    return (F.crc32(F.col(column).cast("binary")) % F.lit(ORDER_BUCKETS)).cast("int")


def unique_changes(changes: DataFrame) -> DataFrame:
    """The first delivery of each change (``order_id``, ``change_id``); repeats carry the same change."""
    return changes.dropDuplicates(["order_id", "change_id"])


def winners(rows: DataFrame, *, tie_break: Sequence[str] = ("change_id",)) -> DataFrame:
    """One row per ``order_id``: the latest ``order_ts``, then the highest ``tie_break`` values."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col("order_ts").desc(), *[F.col(c).desc() for c in tie_break]]
    rank = F.row_number().over(Window.partitionBy("order_id").orderBy(*order))
    return rows.withColumn("_rank", rank).filter(F.col("_rank") == 1).drop("_rank")


def change_counts(changes: DataFrame) -> tuple[int, int]:
    """(changes after de-duplication, repeated deliveries dropped), from one aggregate."""
    from pyspark.sql import functions as F

    row = changes.agg(
        F.count(F.lit(1)).alias("rows"), F.countDistinct("order_id", "change_id").alias("unique")
    ).first()
    assert row is not None  # a global aggregate has its one row
    rows, unique = int(row["rows"]), int(row["unique"])
    return unique, rows - unique


def touched_buckets(frame: DataFrame) -> list[int]:
    """The buckets a MERGE source touches: at most ``ORDER_BUCKETS`` small values."""
    return sorted(int(r[0]) for r in frame.select(BUCKET_COLUMN).distinct().collect())


def bucket_condition(buckets: Sequence[int]) -> str:
    """The MERGE condition: the touched buckets as literals (Delta prunes the target's partitions by them),
    then the key. ``buckets`` must not be empty."""
    listed = ", ".join(str(int(b)) for b in buckets)
    return f"t.{BUCKET_COLUMN} IN ({listed}) AND t.{BUCKET_COLUMN} = s.{BUCKET_COLUMN} AND t.order_id = s.order_id"


def _merge(
    spark: SparkSession,
    uri: str,
    *,
    source: DataFrame,
    condition: str,
    clauses: Callable[[Any], Any],
    txn: tuple[str, int],
) -> None:
    """One MERGE into ``uri`` carrying the transaction ``txn`` (app id, batch id)."""
    from delta.tables import DeltaTable

    from jobs.lake._jvm import _dml_settings, _session_settings

    merger = clauses(DeltaTable.forPath(spark, uri).alias("t").merge(source.alias("s"), condition))
    with _session_settings(spark, _dml_settings(*txn)):
        merger.execute()


def _done(table: Any, app_id: str, batch_id: int) -> bool:
    found = with_retries(lambda: table.transaction_version(app_id), what=f"transaction lookup on {table.uri}")
    return found is not None and found >= batch_id


class SparkCowWriter(CowTablesWriter):
    """Applies micro-batches of changes to the copy-on-write tables with delta-spark MERGEs."""

    def plan(self, changes: DataFrame) -> DataFrame:
        """The batch's winners against the kept tombstones: MERGE source columns plus ``_delete`` and ``_late``
        (an insert or update no newer than the order's tombstone: a deleted order stays deleted)."""
        from pyspark.sql import functions as F

        spark = changes.sparkSession
        kept = (
            spark.read.format("delta")
            .load(self.tables.tombstones.uri)
            .groupBy("order_id")
            .agg(F.max("order_ts").alias("_dead_ts"))
        )
        best = winners(unique_changes(changes))
        is_delete = F.col("op") == "delete"
        late = ~is_delete & F.coalesce(F.col("order_ts") <= F.col("_dead_ts"), F.lit(False))
        return best.join(kept, "order_id", "left").select(
            *[F.col(c) for c in ORDER_COLUMNS],
            utc_date("order_ts").alias(PARTITION_COLUMN),
            bucket_of("order_id").alias(BUCKET_COLUMN),
            is_delete.alias(DELETE_FLAG),
            late.alias("_late"),
        )

    def write(self, changes: DataFrame, batch_id: int) -> BatchOutcome:
        """Apply one micro-batch of parsed changes (``CHANGE_SCHEMA`` columns, a DataFrame) exactly once."""
        from pyspark.sql import functions as F

        started = time.perf_counter()
        spark = changes.sparkSession
        unique, duplicates = change_counts(changes)
        plan = self.plan(changes).persist()
        try:
            figures = plan.agg(
                F.count(F.when(F.col("_late"), 1)).alias("late"),
                F.count(F.when(F.col(DELETE_FLAG), 1)).alias("deletes"),
            ).first()
            assert figures is not None
            late, deletes = int(figures["late"]), int(figures["deletes"])
            committed = False
            tombstones, orders = self.tables.tombstones, self.tables.orders
            if deletes and not _done(tombstones, self.app_id, batch_id):
                # Tombstones first: if the MERGE below then fails, the replay finds them and resolves the same.
                gone = plan.filter(F.col(DELETE_FLAG)).select("order_id", "order_ts")
                with_retries(
                    lambda: _merge(
                        spark,
                        tombstones.uri,
                        source=gone,
                        condition="t.order_id = s.order_id",
                        clauses=lambda m: m.whenMatchedUpdate(
                            condition="s.order_ts >= t.order_ts", set={"order_ts": "s.order_ts"}
                        ).whenNotMatchedInsert(values={"order_id": "s.order_id", "order_ts": "s.order_ts"}),
                        txn=(self.app_id, batch_id),
                    ),
                    what=f"tombstones of batch {batch_id} into {tombstones.uri}",
                    policy=self._retry,
                )
                committed = True
            source = plan.filter(~F.col("_late")).drop("_late")
            buckets = touched_buckets(source)
            stored = [*ORDER_COLUMNS, PARTITION_COLUMN, BUCKET_COLUMN]
            if not buckets:
                # Nothing to merge: still one commit carrying the batch's transaction, as every other batch
                # (and the delta-rs writer) makes, so each micro-batch has its version of ``orders`` to read
                # as of (time travel), and a replay finds it.
                appended = with_retries(
                    lambda: orders.append(
                        source.select(*stored).limit(0),
                        app_id=self.app_id,
                        batch_id=batch_id,
                        partition_by=[BUCKET_COLUMN],
                    ),
                    what=f"empty commit of batch {batch_id} to {orders.uri}",
                    policy=self._retry,
                )
                committed = committed or appended.committed
            elif not _done(orders, self.app_id, batch_id):
                values = {c: f"s.{c}" for c in stored}
                newer = "s.order_ts >= t.order_ts"
                with_retries(
                    lambda: _merge(
                        spark,
                        orders.uri,
                        source=source,
                        condition=bucket_condition(buckets),
                        clauses=lambda m: (
                            m.whenMatchedDelete(condition=f"{newer} AND s.{DELETE_FLAG}")
                            .whenMatchedUpdate(condition=f"{newer} AND NOT s.{DELETE_FLAG}", set=values)
                            .whenNotMatchedInsert(condition=f"NOT s.{DELETE_FLAG}", values=values)
                        ),
                        txn=(self.app_id, batch_id),
                    ),
                    what=f"MERGE of batch {batch_id} into {orders.uri}",
                    policy=self._retry,
                )
                committed = True
        finally:
            plan.unpersist()
        visible_at = time.time()
        self._purge.maybe_run(retry=self._retry)
        return BatchOutcome(
            batch_id=batch_id,
            changes=unique,
            duplicates=duplicates,
            late=late,
            committed=committed,
            write_s=time.perf_counter() - started,
            visible_at=visible_at,
        )


class SparkMorWriter(MorLogWriter):
    """Appends micro-batches of changes to the merge-on-read change log, written by the executors."""

    def log_rows(self, changes: DataFrame, log_seq: int) -> tuple[DataFrame, int, int]:
        from pyspark.sql import functions as F

        unique, duplicates = change_counts(changes)
        rows = unique_changes(changes).select(
            *CHANGE_SCHEMA.names,
            F.lit(log_seq).cast("bigint").alias(LOG_SEQ),
            utc_date("order_ts").alias(PARTITION_COLUMN),
        )
        return rows, unique, duplicates


class SparkCompactor(Compactor):
    """Merges the pending change log into ``orders_base`` as one Spark job (a MERGE on the executors).

    Safe beside the stream (which only appends to the log) and beside another compactor: two MERGEs into the
    base conflict in Delta, the loser is retried and starts over from the base's new recorded position.
    """

    _engine_note = " (Spark)"

    def __init__(
        self,
        spark: SparkSession,
        tables: OrdersTables,
        *,
        tombstone_retention: timedelta = DEFAULT_TOMBSTONE_RETENTION,
        retry: RetryPolicy | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(tables, tombstone_retention=tombstone_retention, retry=retry, clock=clock)
        self.spark = spark

    def _log(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.tables.changes.uri)

    def status(self) -> CompactionStatus:
        """Where compaction stands against the change log (one aggregate over the log's ``log_seq``)."""
        from pyspark.sql import functions as F

        through = merged_through(self.tables)
        seq = F.col(LOG_SEQ)
        row = (
            self._log()
            .agg(F.max(seq).alias("latest"), F.countDistinct(F.when(seq > through, seq)).alias("pending"))
            .first()
        )
        assert row is not None
        latest = -1 if row["latest"] is None else int(row["latest"])
        return CompactionStatus(merged_through=through, latest=latest, pending_commits=int(row["pending"]))

    def rows(self, pending: DataFrame) -> DataFrame:
        """Base rows for pending change-log rows: the winner per order, deletes as tombstone rows."""
        from pyspark.sql import functions as F

        best = winners(unique_changes(pending))
        deleted = F.col("op") == "delete"

        def kept(name: str) -> Column:
            return F.when(deleted, F.lit(None)).otherwise(F.col(name)).alias(name)

        return best.select(
            "order_id",
            "order_ts",
            kept("customer_id"),
            kept("amount"),
            kept("status"),
            deleted.alias(IS_DELETED),
            utc_date("order_ts").alias(PARTITION_COLUMN),
            bucket_of("order_id").alias(BUCKET_COLUMN),
        )

    def _attempt(self) -> CompactionOutcome:
        from pyspark.sql import functions as F

        base = self.tables.base
        through = merged_through(self.tables)
        pending = self._log().filter(F.col(LOG_SEQ) > through)
        found = pending.agg(F.count(F.lit(1)).alias("rows"), F.max(LOG_SEQ).alias("last")).first()
        assert found is not None
        if int(found["rows"]) == 0:
            latest = self.status().latest
            if latest < through:
                raise OrdersStateError(
                    f"orders_base records changes merged through log_seq {through}, but {self.tables.changes.uri} "
                    f"ends at {latest}: the change log was re-created without its base. Delete both tables and "
                    "restart the job from a fresh checkpoint, or restore the change log."
                )
            return CompactionOutcome(through, 0, 0, committed=False, seconds=0.0)
        last = int(found["last"])
        rows = self.rows(pending).persist()
        try:
            count = rows.count()
            buckets = touched_buckets(rows)
            stored = [*ORDER_COLUMNS, IS_DELETED, PARTITION_COLUMN, BUCKET_COLUMN]
            values = {c: f"s.{c}" for c in stored}
            _merge(
                self.spark,
                base.uri,
                source=rows,
                condition=bucket_condition(buckets),
                clauses=lambda m: m.whenMatchedUpdate(
                    condition="s.order_ts >= t.order_ts", set=values
                ).whenNotMatchedInsert(values=values),
                txn=(COMPACTION_APP_ID, last),
            )
        finally:
            rows.unpersist()
        now_through = merged_through(self.tables)
        return CompactionOutcome(
            merged_through=now_through,
            changes=int(found["rows"]),
            rows=count,
            committed=now_through == last,
            seconds=0.0,
        )
