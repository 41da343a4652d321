"""Order CDC rules as pure functions over Arrow tables: which change wins, what each layout writes, what a
reader sees. The job, the compaction and the snapshot read all decide through these, so both layouts end
in the same state.

The rules, once:
- a change is identified by its ``order_id`` and ``change_id`` (change ids are numbered per source, like a
  database's log positions, and an order belongs to one source); a repeated delivery counts once;
- per ``order_id`` the change with the latest ``order_ts`` wins (precombine); among equal ``order_ts`` the
  higher ``change_id``; a winning delete removes the order;
- a delete leaves a tombstone (``order_id``, ``order_ts``) so a late insert or update with an older
  ``order_ts`` cannot bring the order back, for as long as the tombstone is kept (the retention window).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

import pyarrow as pa
import pyarrow.compute as pc

TS = pa.timestamp("us", tz="UTC")

# A parsed change, as the job hands it over (event_id/event_time from the envelope, the rest the payload).
_CHANGE_FIELDS: list[pa.Field] = [
    pa.field("change_id", pa.int64()),
    pa.field("op", pa.string()),
    pa.field("order_id", pa.string()),
    pa.field("order_ts", TS),
    pa.field("customer_id", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("status", pa.string()),
    pa.field("event_id", pa.string()),
    pa.field("event_time", TS),
]
CHANGE_SCHEMA = pa.schema(_CHANGE_FIELDS)
OPS: tuple[str, ...] = ("insert", "update", "delete")

# What an order row is (DESIGN.md), and the partition column derived from order_ts.
ORDER_COLUMNS: tuple[str, ...] = ("order_id", "order_ts", "customer_id", "amount", "status")
PARTITION_COLUMN = "order_date"
ORDER_SCHEMA = pa.schema(
    [CHANGE_SCHEMA.field(name) for name in ORDER_COLUMNS] + [pa.field(PARTITION_COLUMN, pa.date32())]
)

# The tables that are MERGEd by order_id (cow's orders, mor's base) are partitioned by a bucket of it: an order
# never changes bucket (it changes order_date whenever an update crosses midnight), so a MERGE's condition can
# name the buckets its batch touches and Delta scans and rewrites those partitions only. crc32 of the id's UTF-8
# bytes: Spark has it (``crc32``) and so has Python (``zlib.crc32``), so every writer puts an order in the same
# bucket. Fixed per table: changing the count moves orders between buckets and needs the table rewritten.
BUCKET_COLUMN = "order_bucket"
ORDER_BUCKETS = 16
ORDERS_TABLE_SCHEMA = ORDER_SCHEMA.append(pa.field(BUCKET_COLUMN, pa.int32()))

# cow: the MERGE source flags deletes with this column (not stored); tombstones live in their own table.
DELETE_FLAG = "_delete"
TOMBSTONE_SCHEMA = pa.schema([ORDER_SCHEMA.field("order_id"), ORDER_SCHEMA.field("order_ts")])

# mor: the change log is the changes plus the log sequence of the micro-batch that appended them; the
# base holds orders and, flagged, the tombstones of deleted ones.
LOG_SEQ = "log_seq"
CHANGE_LOG_SCHEMA = pa.schema(
    [*CHANGE_SCHEMA, pa.field(LOG_SEQ, pa.int64()), pa.field(PARTITION_COLUMN, pa.date32())]
)
IS_DELETED = "is_deleted"
BASE_SCHEMA = pa.schema(
    [
        *(ORDER_SCHEMA.field(n) for n in ORDER_COLUMNS),
        pa.field(IS_DELETED, pa.bool_()),
        ORDER_SCHEMA.field(PARTITION_COLUMN),
        ORDERS_TABLE_SCHEMA.field(BUCKET_COLUMN),
    ]
)

_RANK = "__rank"


def with_order_date(rows: pa.Table) -> pa.Table:
    """Add (or replace) ``order_date``: the UTC date of ``order_ts``, the partition column."""
    dates = pc.cast(rows["order_ts"], pa.date32())
    if PARTITION_COLUMN in rows.column_names:
        return rows.set_column(rows.column_names.index(PARTITION_COLUMN), PARTITION_COLUMN, dates)
    return rows.append_column(PARTITION_COLUMN, dates)


def order_bucket(order_id: str) -> int:
    """The bucket (partition) of an order in the MERGEd tables: ``crc32(utf-8 bytes) % ORDER_BUCKETS``."""
    return zlib.crc32(order_id.encode()) % ORDER_BUCKETS


def with_order_bucket(rows: pa.Table) -> pa.Table:
    """Add ``order_bucket`` (:func:`order_bucket` of each ``order_id``)."""
    buckets = pa.array([order_bucket(str(i)) for i in rows["order_id"].to_pylist()], pa.int32())
    return rows.append_column(BUCKET_COLUMN, buckets)


def dedupe_changes(changes: pa.Table) -> tuple[pa.Table, int]:
    """Keep the first delivery of each change (``order_id``, ``change_id``); return the changes and how many
    repeated deliveries were dropped."""
    if changes.num_rows == 0:
        return changes, 0
    indexed = changes.append_column(_RANK, pa.array(range(changes.num_rows), pa.int64()))
    firsts = indexed.group_by(["order_id", "change_id"], use_threads=False).aggregate([(_RANK, "min")])
    keep = pc.sort_indices(firsts[f"{_RANK}_min"])
    unique = changes.take(pc.take(firsts[f"{_RANK}_min"], keep))
    return unique, changes.num_rows - unique.num_rows


def latest_per_order(rows: pa.Table, *, tie_break: Sequence[str] = ("change_id",)) -> pa.Table:
    """One row per ``order_id`` (sorted by it): the latest ``order_ts``, then the highest ``tie_break`` values.

    The winner is the same whatever order the rows arrive in, so a replayed batch resolves the same way.
    """
    if rows.num_rows == 0:
        return rows
    indexed = rows.append_column(_RANK, pa.array(range(rows.num_rows), pa.int64()))
    order: list[tuple[str, Literal["ascending", "descending"]]] = [
        ("order_id", "ascending"),
        ("order_ts", "descending"),
    ]
    ranked = indexed.sort_by(order + [(c, "descending") for c in tie_break])
    # Without threads, groups come out in the order they first appear: sorted by order_id.
    firsts = ranked.group_by("order_id", use_threads=False).aggregate([(_RANK, "first")])
    return rows.take(firsts[f"{_RANK}_first"])


def _is_delete(rows: pa.Table) -> pa.ChunkedArray:
    return cast("pa.ChunkedArray", pc.equal(rows["op"], pa.scalar("delete")))


@dataclass(frozen=True)
class CowPlan:
    """What one micro-batch does to the copy-on-write tables.

    Attributes:
        merge_source: one row per order for the MERGE into ``orders`` (``ORDERS_TABLE_SCHEMA`` plus ``_delete``).
        tombstones: tombstones to upsert (orders this batch deletes), ``TOMBSTONE_SCHEMA``.
        late: changes dropped because a kept tombstone is as new or newer (a deleted order stays deleted).
    """

    merge_source: pa.Table
    tombstones: pa.Table
    late: int


def plan_cow_batch(changes: pa.Table, tombstones: pa.Table) -> CowPlan:
    """Resolve a micro-batch of (de-duplicated) changes against the tombstones kept so far.

    Args:
        changes: the batch's changes (``CHANGE_SCHEMA`` columns), one delivery per change.
        tombstones: kept tombstones (``TOMBSTONE_SCHEMA``); those for other orders are ignored.
    """
    winners = latest_per_order(changes)
    deletes = _is_delete(winners)
    dead = _tombstone_times(tombstones, winners["order_id"])
    # An insert or update no newer than the order's tombstone is a late change to a deleted order.
    older: Any = pc.fill_null(pc.less_equal(winners["order_ts"], dead), pa.scalar(False))
    late = pc.and_(pc.invert(deletes), older)
    kept = winners.filter(pc.invert(late))
    source = with_order_bucket(with_order_date(kept.select(list(ORDER_COLUMNS))))
    source = source.append_column(DELETE_FLAG, _is_delete(kept))
    gone = winners.filter(deletes).select(list(TOMBSTONE_SCHEMA.names))
    return CowPlan(
        merge_source=source.cast(ORDERS_TABLE_SCHEMA.append(pa.field(DELETE_FLAG, pa.bool_()))),
        tombstones=gone.cast(TOMBSTONE_SCHEMA),
        late=int(pc.sum(late).as_py() or 0),
    )


def _tombstone_times(tombstones: pa.Table, order_ids: pa.ChunkedArray) -> pa.Array:
    """The kept tombstone's ``order_ts`` for each of ``order_ids`` (null where there is none)."""
    if tombstones.num_rows == 0:
        return pa.nulls(len(order_ids), TS)
    newest = tombstones.group_by("order_id", use_threads=False).aggregate([("order_ts", "max")])
    ids = pc.cast(newest["order_id"], pa.string())
    where = pc.index_in(pc.cast(order_ids, pa.string()), value_set=ids.combine_chunks())
    return pc.take(newest["order_ts_max"].combine_chunks(), where)


def change_log_rows(changes: pa.Table, log_seq: int) -> pa.Table:
    """The rows a micro-batch appends to the merge-on-read change log (``CHANGE_LOG_SCHEMA``)."""
    rows = changes.select(list(CHANGE_SCHEMA.names)).append_column(
        LOG_SEQ, pa.array([log_seq] * changes.num_rows, pa.int64())
    )
    return with_order_date(rows).cast(CHANGE_LOG_SCHEMA)


def compaction_rows(pending: pa.Table) -> pa.Table:
    """Base rows (``BASE_SCHEMA``) for the pending change-log rows: the winner per order, deletes as
    tombstone rows (``is_deleted`` true, only ``order_id``/``order_ts``/``order_date`` set)."""
    unique, _ = dedupe_changes(pending)
    winners = latest_per_order(unique)
    deleted = _is_delete(winners)
    columns: dict[str, Any] = {"order_id": winners["order_id"], "order_ts": winners["order_ts"]}
    for name in ("customer_id", "amount", "status"):
        columns[name] = pc.if_else(deleted, pa.scalar(None, winners[name].type), winners[name])
    columns[IS_DELETED] = deleted
    return with_order_bucket(with_order_date(pa.table(columns))).cast(BASE_SCHEMA)


def merge_snapshot(base: pa.Table, pending: pa.Table) -> pa.Table:
    """The current orders (``ORDER_SCHEMA``, sorted by ``order_id``) from the base and pending changes.

    Per order the latest ``order_ts`` wins across the base row (live or tombstone) and the pending changes;
    among equals a pending change beats the base, as compaction would apply it.
    """
    dead: Any = pc.fill_null(base[IS_DELETED], pa.scalar(False))
    from_base = base.select(list(ORDER_COLUMNS)).append_column("op", pc.if_else(dead, "delete", "update"))
    from_base = from_base.append_column("__pending", pa.array([0] * base.num_rows, pa.int8()))
    from_base = from_base.append_column("change_id", pa.array([0] * base.num_rows, pa.int64()))
    unique, _ = dedupe_changes(pending)
    from_log = unique.select([*ORDER_COLUMNS, "op"]).append_column(
        "__pending", pa.array([1] * unique.num_rows, pa.int8())
    )
    from_log = from_log.append_column("change_id", unique["change_id"])
    both = pa.concat_tables([from_base.cast(from_log.schema), from_log])
    winners = latest_per_order(both, tie_break=("__pending", "change_id"))
    return current_orders(winners.filter(pc.invert(_is_delete(winners))))


def current_orders(rows: pa.Table) -> pa.Table:
    """``rows`` as orders: ``ORDER_SCHEMA`` columns (``order_date`` derived), sorted by ``order_id``."""
    shaped = with_order_date(rows.select(list(ORDER_COLUMNS)))
    return shaped.cast(ORDER_SCHEMA).sort_by("order_id")


def tombstone_cutoff_predicate(cutoff: datetime, *, flag: str | None = None) -> str:
    """SQL predicate (DataFusion and Spark) matching tombstones older than ``cutoff``."""
    stamp = cutoff.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # A plain string literal: DataFusion's TIMESTAMP literal has no time zone and cannot be compared with
    # the column; both DataFusion and Spark cast the string to the column's type.
    older = f"order_ts < '{stamp}'"
    return f"{flag} AND {older}" if flag else older
