"""The orders tables of each layout, and what writes and reads them (delta-rs through ``jobs.lake``).

copy-on-write (``cow``): ``orders`` (the current orders, partitioned by ``order_date``, change data feed
on) and ``orders_tombstones`` (deleted orders' last ``order_ts``). Each micro-batch is one MERGE into
``orders`` (plus one upsert of tombstones when it deletes orders).

merge-on-read (``mor``): ``orders_changes`` (the change log: every change, appended once per micro-batch
with the batch's ``log_seq``) and ``orders_base`` (orders and, flagged ``is_deleted``, tombstones).
Compaction merges the log rows after the base's recorded ``log_seq`` into the base, and records the last
``log_seq`` it merged as the base's transaction version of the compaction app id, in the same commit.

Every write carries the micro-batch's transaction id and is skipped when its table already has it, so a
replayed batch changes nothing. Lost commit races (a concurrent compaction, OPTIMIZE or other writer) are
retried against the table's new version; the state rules (``_cdc``) make a re-applied change harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from jobs._retry import RetryPolicy
from jobs.errors import JobError
from jobs.lake import DeltaRsEngine, LakeEngine, LakeTable, with_retries
from jobs.pipelines._cdc import (
    BASE_SCHEMA,
    BUCKET_COLUMN,
    CHANGE_LOG_SCHEMA,
    DELETE_FLAG,
    IS_DELETED,
    LOG_SEQ,
    ORDERS_TABLE_SCHEMA,
    PARTITION_COLUMN,
    TOMBSTONE_SCHEMA,
    change_log_rows,
    compaction_rows,
    current_orders,
    dedupe_changes,
    merge_snapshot,
    plan_cow_batch,
    tombstone_cutoff_predicate,
)

log = logging.getLogger(__name__)

Layout = Literal["cow", "mor"]
LAYOUTS: tuple[Layout, ...] = ("cow", "mor")

# The transaction app id under which compaction records, in orders_base, the last log_seq it merged.
COMPACTION_APP_ID = "lakestack-orders-compaction"
# The transaction app id of tombstone purges (their batch id is the purge's cutoff, in epoch seconds).
PURGE_APP_ID = "lakestack-orders-tombstone-purge"
DEFAULT_TOMBSTONE_RETENTION = timedelta(days=7)
# How often a writer drops tombstones past the retention (each purge is one more commit).
PURGE_EVERY = timedelta(hours=1)


class OrdersStateError(JobError):
    """The orders tables disagree with each other (e.g. one was deleted and re-created without the other)."""


@dataclass(frozen=True)
class OrdersTables:
    """The orders tables under one lake root, by their fixed names.

    Attributes:
        lake: the lake root URI (a path, ``s3://bucket/prefix``, ``abfss://...``).
        storage_options: from ``jobs.lake.storage_options_for(lake, ...)``; the same for every table.
        engine: the lake engine (delta-rs by default).
    """

    lake: str
    storage_options: Mapping[str, str] = field(default_factory=dict)
    engine: LakeEngine = field(default_factory=DeltaRsEngine)

    def table(self, name: str) -> LakeTable:
        """The handle of the table called ``name`` under the lake root."""
        return self.engine.table(f"{self.lake.rstrip('/')}/{name}", storage_options=self.storage_options)

    @property
    def orders(self) -> LakeTable:
        return self.table("orders")

    @property
    def tombstones(self) -> LakeTable:
        return self.table("orders_tombstones")

    @property
    def base(self) -> LakeTable:
        return self.table("orders_base")

    @property
    def changes(self) -> LakeTable:
        return self.table("orders_changes")

    @property
    def quarantine(self) -> LakeTable:
        return self.table("orders_quarantine")

    def layout_tables(self, layout: Layout) -> dict[str, LakeTable]:
        """The tables ``layout`` keeps its orders in, by name (quarantine aside)."""
        if layout == "cow":
            return {"orders": self.orders, "orders_tombstones": self.tombstones}
        return {"orders_base": self.base, "orders_changes": self.changes}

    def create(self, layout: Layout) -> None:
        """Create the layout's tables when they do not exist: the MERGEd ones (``orders``, ``orders_base``)
        partitioned by ``order_bucket``, the change log by ``order_date``."""
        if layout == "cow":
            # The change data feed lets readers follow orders as inserts, updates and deletes.
            self.orders.create(ORDERS_TABLE_SCHEMA, partition_by=[BUCKET_COLUMN], change_data_feed=True)
            self.tombstones.create(TOMBSTONE_SCHEMA)
        else:
            self.base.create(BASE_SCHEMA, partition_by=[BUCKET_COLUMN])
            self.changes.create(CHANGE_LOG_SCHEMA, partition_by=[PARTITION_COLUMN])


@dataclass(frozen=True)
class BatchOutcome:
    """What writing one micro-batch of changes did.

    Attributes:
        batch_id: the micro-batch.
        changes: changes applied (after de-duplication); duplicates: repeated deliveries dropped.
        late: changes dropped as older than a deleted order's tombstone (cow; mor drops them at compaction).
        committed: False when every table already had this batch (a replay).
        write_s: seconds spent writing; visible_at: epoch seconds when the batch became readable.
        log_seq: the change-log sequence of the batch (mor).
    """

    batch_id: int
    changes: int
    duplicates: int
    late: int
    committed: bool
    write_s: float
    visible_at: float
    log_seq: int | None = None


class _TombstonePurge:
    """Drops tombstones older than the retention from one table, at most once per ``PURGE_EVERY``."""

    def __init__(
        self, table: LakeTable, *, retention: timedelta, flag: str | None, clock: Callable[[], datetime]
    ) -> None:
        self._table = table
        self._retention = retention
        self._flag = flag
        self._clock = clock
        self._last: datetime | None = None

    def maybe_run(self, *, retry: RetryPolicy | None) -> int:
        now = self._clock()
        if self._last is not None and now - self._last < PURGE_EVERY:
            return 0
        self._last = now
        cutoff = now - self._retention
        predicate = tombstone_cutoff_predicate(cutoff, flag=self._flag)
        result = with_retries(
            lambda: self._table.delete(predicate),
            what=f"tombstone purge of {self._table.uri}",
            policy=retry,
        )
        if result.deleted:
            log.info(
                "orders: dropped %d tombstones older than %s from %s", result.deleted, cutoff, self._table.uri
            )
        return result.deleted


class CowTablesWriter:
    """What both copy-on-write writers (delta-rs here, delta-spark in ``_orders_spark``) start from: the tables,
    created for the layout, the query's app id, the retry policy and the tombstones' purge."""

    def __init__(
        self,
        tables: OrdersTables,
        *,
        app_id: str,
        tombstone_retention: timedelta = DEFAULT_TOMBSTONE_RETENTION,
        retry: RetryPolicy | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.tables = tables
        self.app_id = app_id
        self._retry = retry
        tables.create("cow")
        self._purge = _TombstonePurge(
            tables.tombstones, retention=tombstone_retention, flag=None, clock=clock
        )


class CowWriter(CowTablesWriter):
    """Applies micro-batches of changes to the copy-on-write tables (one MERGE into ``orders`` each)."""

    def write(self, changes: pa.Table, batch_id: int) -> BatchOutcome:
        """Apply one micro-batch of parsed changes (``CHANGE_SCHEMA``) exactly once."""
        started = time.perf_counter()
        orders, tombstones = self.tables.orders, self.tables.tombstones
        unique, duplicates = dedupe_changes(changes)
        ids = pc.unique(unique["order_id"]).to_pylist()
        kept = tombstones.read(filters=[("order_id", "in", ids)]) if ids else TOMBSTONE_SCHEMA.empty_table()
        plan = plan_cow_batch(unique, kept)
        committed = False
        if plan.tombstones.num_rows:
            # Tombstones first: if the MERGE below then fails, the replay finds them and resolves the same.
            done = with_retries(
                lambda: tombstones.merge(
                    plan.tombstones,
                    keys=["order_id"],
                    precombine="order_ts",
                    app_id=self.app_id,
                    batch_id=batch_id,
                ),
                what=f"tombstones of batch {batch_id} into {tombstones.uri}",
                policy=self._retry,
            )
            committed = done.committed
        merged = with_retries(
            lambda: orders.merge(
                plan.merge_source,
                keys=["order_id"],
                precombine="order_ts",
                delete_column=DELETE_FLAG,
                app_id=self.app_id,
                batch_id=batch_id,
                partition_by=[BUCKET_COLUMN],
            ),
            what=f"MERGE of batch {batch_id} into {orders.uri}",
            policy=self._retry,
        )
        visible_at = time.time()
        self._purge.maybe_run(retry=self._retry)
        return BatchOutcome(
            batch_id=batch_id,
            changes=unique.num_rows,
            duplicates=duplicates,
            late=plan.late,
            committed=committed or merged.committed,
            write_s=time.perf_counter() - started,
            visible_at=visible_at,
        )


class MorLogWriter:
    """What both merge-on-read writers (delta-rs here, delta-spark in ``_orders_spark``) share: one append of a
    micro-batch's unique changes to ``orders_changes`` exactly once, each commit with its ``log_seq``. The
    subclass turns a batch into the log's rows (:meth:`log_rows`)."""

    def __init__(self, tables: OrdersTables, *, app_id: str, retry: RetryPolicy | None = None) -> None:
        self.tables = tables
        self.app_id = app_id
        self._retry = retry
        tables.create("mor")

    def log_rows(self, changes: Any, log_seq: int) -> tuple[Any, int, int]:
        """The rows to append for ``changes`` at ``log_seq``, the unique changes' count and the duplicates'."""
        raise NotImplementedError

    def write(self, changes: Any, batch_id: int) -> BatchOutcome:
        """Append one micro-batch of parsed changes (``CHANGE_SCHEMA``) to ``orders_changes`` exactly once."""
        started = time.perf_counter()
        log_table = self.tables.changes
        # The log's version now, plus one: larger than every log_seq already committed (this query is the
        # log's only appender, and every batch commits at a version above the one it read), so
        # "log_seq > S" is exactly the rows appended after compaction merged through S.
        log_seq = (log_table.version() or 0) + 1
        rows, unique, duplicates = self.log_rows(changes, log_seq)
        appended = with_retries(
            lambda: log_table.append(
                rows, app_id=self.app_id, batch_id=batch_id, partition_by=[PARTITION_COLUMN]
            ),
            what=f"append of batch {batch_id} to {log_table.uri}",
            policy=self._retry,
        )
        return BatchOutcome(
            batch_id=batch_id,
            changes=unique,
            duplicates=duplicates,
            late=0,
            committed=appended.committed,
            write_s=time.perf_counter() - started,
            visible_at=time.time(),
            log_seq=log_seq,
        )


class MorWriter(MorLogWriter):
    """Appends micro-batches of changes to the merge-on-read change log (one commit each), from Arrow."""

    def log_rows(self, changes: pa.Table, log_seq: int) -> tuple[pa.Table, int, int]:
        unique, duplicates = dedupe_changes(changes)
        return change_log_rows(unique, log_seq), unique.num_rows, duplicates


@dataclass(frozen=True)
class CompactionStatus:
    """How far compaction got.

    Attributes:
        merged_through: the last ``log_seq`` merged into the base (-1: nothing yet).
        latest: the last ``log_seq`` in the change log (-1: empty).
        pending_commits: change-log commits not yet merged.
    """

    merged_through: int
    latest: int
    pending_commits: int


@dataclass(frozen=True)
class CompactionOutcome:
    """What one compaction did.

    Attributes:
        merged_through: the base's recorded ``log_seq`` after the run.
        changes: change-log rows read; rows: base rows written (one per order, tombstones included).
        committed: False when there was nothing to merge or another compaction got there first.
        seconds: wall time of the run, retries included.
    """

    merged_through: int
    changes: int
    rows: int
    committed: bool
    seconds: float


class Compactor:
    """Merges the pending change log into ``orders_base``; safe to run beside the stream and other compactors.

    The stream appends to ``orders_changes`` only and compaction writes ``orders_base`` only, so neither
    waits for the other. Two compactions (or a compaction and an OPTIMIZE of the base) race on the base;
    the loser's commit fails and it starts over from the base's new recorded position.
    """

    # What the compaction log line adds after its time (the Spark compactor names itself).
    _engine_note = ""

    def __init__(
        self,
        tables: OrdersTables,
        *,
        tombstone_retention: timedelta = DEFAULT_TOMBSTONE_RETENTION,
        retry: RetryPolicy | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.tables = tables
        self._retry = retry
        tables.create("mor")
        self._purge = _TombstonePurge(
            tables.base, retention=tombstone_retention, flag=IS_DELETED, clock=clock
        )

    def status(self) -> CompactionStatus:
        """Where compaction stands against the change log."""
        through = merged_through(self.tables)
        latest = _latest_log_seq(self.tables.changes)
        pending = self.tables.changes.read(columns=[LOG_SEQ], filters=[(LOG_SEQ, ">", through)])
        commits = len(pc.unique(pending[LOG_SEQ])) if pending.num_rows else 0
        return CompactionStatus(merged_through=through, latest=latest, pending_commits=commits)

    def run(self) -> CompactionOutcome:
        """Merge every change-log row after the recorded position into the base, in one commit."""
        started = time.perf_counter()
        outcome = with_retries(
            self._attempt, what=f"compaction of {self.tables.changes.uri}", policy=self._retry
        )
        self._purge.maybe_run(retry=self._retry)
        seconds = time.perf_counter() - started
        if outcome.committed:
            log.info(
                "orders: compacted %d changes into %d base rows through log_seq %d in %.2fs%s",
                outcome.changes,
                outcome.rows,
                outcome.merged_through,
                seconds,
                self._engine_note,
            )
        return CompactionOutcome(
            merged_through=outcome.merged_through,
            changes=outcome.changes,
            rows=outcome.rows,
            committed=outcome.committed,
            seconds=seconds,
        )

    def _attempt(self) -> CompactionOutcome:
        base, changes = self.tables.base, self.tables.changes
        through = merged_through(self.tables)
        pending = changes.read(filters=[(LOG_SEQ, ">", through)])
        if pending.num_rows == 0:
            latest = _latest_log_seq(changes)
            if latest < through:
                raise OrdersStateError(
                    f"orders_base records changes merged through log_seq {through}, but {changes.uri} ends at "
                    f"{latest}: the change log was re-created without its base. Delete both tables and "
                    "restart the job from a fresh checkpoint, or restore the change log."
                )
            return CompactionOutcome(through, 0, 0, committed=False, seconds=0.0)
        last = int(pc.max(pending[LOG_SEQ]).as_py())
        rows = compaction_rows(pending)
        merged = base.merge(
            rows,
            keys=["order_id"],
            precombine="order_ts",
            app_id=COMPACTION_APP_ID,
            batch_id=last,
            partition_by=[BUCKET_COLUMN],
        )
        return CompactionOutcome(
            merged_through=last if merged.committed else merged_through(self.tables),
            changes=pending.num_rows,
            rows=rows.num_rows,
            committed=merged.committed,
            seconds=0.0,
        )


def merged_through(tables: OrdersTables) -> int:
    """The last change-log ``log_seq`` merged into ``orders_base`` (-1 when none)."""
    recorded = tables.base.transaction_version(COMPACTION_APP_ID)
    return -1 if recorded is None else recorded


def _latest_log_seq(changes: LakeTable, *, version: int | None = None) -> int:
    if not changes.exists():
        return -1
    seqs = changes.read(version=version, columns=[LOG_SEQ])[LOG_SEQ]
    return int(pc.max(seqs).as_py()) if len(seqs) else -1


# -- reads -----------------------------------------------------------------------------------------------------


def read_snapshot(tables: OrdersTables, layout: Layout, *, version: int | None = None) -> pa.Table:
    """The orders as of now (or ``version``): every change applied, deletes removed (``ORDER_SCHEMA``).

    ``version`` is a version of ``orders`` (cow) or of ``orders_changes`` (mor: the base as its last
    compaction at or before that log left it, plus the log's rows after it).
    """
    if layout == "cow":
        return current_orders(tables.orders.read(version=version))
    if version is None:
        # The position first, then the base: a compaction between the two reads only makes the base newer
        # than the position, and re-applying a merged change changes nothing.
        through = merged_through(tables)
        base = tables.base.read()
        pending = tables.changes.read(filters=[(LOG_SEQ, ">", through)])
        return merge_snapshot(base, pending)
    latest = _latest_log_seq(tables.changes, version=version)
    compactions = [
        c
        for c in tables.base.commits()
        if c.app_id == COMPACTION_APP_ID and c.batch_id is not None and c.batch_id <= latest
    ]
    if compactions:
        base = tables.base.read(version=compactions[-1].version)
        through = compactions[-1].batch_id or 0
    else:
        base, through = BASE_SCHEMA.empty_table(), -1
    pending = tables.changes.read(version=version, filters=[(LOG_SEQ, ">", through)])
    return merge_snapshot(base, pending)


def read_base(tables: OrdersTables) -> pa.Table:
    """mor's read-optimized read: the base alone, tombstones hidden. It is as stale as the last compaction:
    changes appended since are NOT in it (see ``Compactor.status()`` for how many commits behind it is)."""
    base = tables.base.read()
    dead: Any = pc.fill_null(base[IS_DELETED], pa.scalar(False))
    live = base.filter(pc.invert(dead))
    return current_orders(live)
