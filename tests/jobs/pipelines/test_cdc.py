"""The CDC rules as tables of cases: de-duplication, precombine, deletes and tombstones, both layouts."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest

from jobs.pipelines._cdc import (
    BASE_SCHEMA,
    CHANGE_LOG_SCHEMA,
    CHANGE_SCHEMA,
    TOMBSTONE_SCHEMA,
    change_log_rows,
    compaction_rows,
    dedupe_changes,
    latest_per_order,
    merge_snapshot,
    plan_cow_batch,
    tombstone_cutoff_predicate,
)

T0 = datetime(2026, 3, 1, 23, 59, 50, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def changes(*rows: tuple[int, str, str, int, str]) -> pa.Table:
    """(change_id, op, order_id, order_ts as seconds after T0, status)."""
    return pa.Table.from_pylist(
        [
            {
                "change_id": cid,
                "op": op,
                "order_id": oid,
                "order_ts": at(ts),
                "customer_id": "c1",
                "amount": float(cid),
                "status": status,
                "event_id": f"e{cid}",
                "event_time": at(ts),
            }
            for cid, op, oid, ts, status in rows
        ],
        schema=CHANGE_SCHEMA,
    )


def tombstones(*rows: tuple[str, int]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"order_id": o, "order_ts": at(ts)} for o, ts in rows], schema=TOMBSTONE_SCHEMA
    )


def summary(rows: pa.Table, *columns: str) -> list[tuple]:
    return [tuple(r[c] for c in columns) for r in rows.to_pylist()]


# -- de-duplication and precombine ------------------------------------------------------------------------


def test_dedupe_keeps_the_first_delivery_of_each_change_id():
    batch = changes(
        (1, "insert", "a", 1, "placed"), (2, "update", "a", 2, "paid"), (1, "insert", "a", 1, "x")
    )
    unique, dropped = dedupe_changes(batch)
    assert summary(unique, "change_id", "status") == [(1, "placed"), (2, "paid")]
    assert dropped == 1


def test_dedupe_of_nothing():
    unique, dropped = dedupe_changes(changes())
    assert (unique.num_rows, dropped) == (0, 0)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # newest first in the batch, then an older one: the newest order_ts wins
        ([(2, "update", "a", 5, "paid"), (1, "insert", "a", 1, "placed")], [("a", 2, "paid")]),
        # a delete newer than the update wins
        ([(1, "insert", "a", 1, "placed"), (2, "delete", "a", 3, "placed")], [("a", 2, "placed")]),
        # equal order_ts: the higher change_id wins, whichever arrives first
        ([(7, "update", "a", 4, "late"), (3, "update", "a", 4, "early")], [("a", 7, "late")]),
        # keys are independent and come out sorted by order_id
        (
            [(1, "insert", "b", 1, "placed"), (2, "insert", "a", 1, "placed")],
            [("a", 2, "placed"), ("b", 1, "placed")],
        ),
    ],
)
def test_latest_per_order(rows, expected):
    assert summary(latest_per_order(changes(*rows)), "order_id", "change_id", "status") == expected


# -- copy-on-write ---------------------------------------------------------------------------------------------


def test_cow_plan_resolves_the_batch_and_flags_deletes():
    plan = plan_cow_batch(
        changes(
            (1, "insert", "a", 1, "placed"),
            (3, "update", "a", 3, "paid"),
            (2, "update", "a", 2, "placed"),  # out of order: older than change 3
            (4, "insert", "b", 1, "placed"),
            (5, "delete", "b", 4, "placed"),
        ),
        tombstones(),
    )
    assert summary(plan.merge_source, "order_id", "order_ts", "status", "order_date", "_delete") == [
        ("a", at(3), "paid", date(2026, 3, 1), False),
        ("b", at(4), "placed", date(2026, 3, 1), True),
    ]
    assert summary(plan.tombstones, "order_id", "order_ts") == [("b", at(4))]
    assert plan.late == 0


def test_cow_plan_drops_a_late_change_to_a_deleted_order():
    plan = plan_cow_batch(
        changes(
            (1, "update", "a", 2, "paid"),  # older than a's tombstone: stays deleted
            (2, "update", "b", 9, "paid"),  # newer than b's tombstone: a real change (re-created)
            (3, "insert", "c", 5, "placed"),  # as old as c's tombstone: ties go to the delete
        ),
        tombstones(("a", 4), ("b", 3), ("c", 5), ("z", 1)),
    )
    assert summary(plan.merge_source, "order_id", "status", "_delete") == [("b", "paid", False)]
    assert plan.late == 2
    assert plan.tombstones.num_rows == 0


def test_cow_plan_partition_date_follows_order_ts_across_midnight():
    plan = plan_cow_batch(
        changes((1, "insert", "a", 5, "placed"), (2, "update", "a", 15, "paid")), tombstones()
    )
    assert summary(plan.merge_source, "order_date") == [(date(2026, 3, 2),)]


# -- merge-on-read ---------------------------------------------------------------------------------------------


def test_change_log_rows_carry_the_log_sequence_and_date():
    rows = change_log_rows(changes((1, "insert", "a", 1, "placed"), (2, "delete", "b", 12, "placed")), 41)
    assert rows.schema == CHANGE_LOG_SCHEMA
    assert summary(rows, "change_id", "log_seq", "order_date") == [
        (1, 41, date(2026, 3, 1)),
        (2, 41, date(2026, 3, 2)),
    ]


def test_compaction_rows_keep_deletes_as_tombstones():
    pending = changes(
        (1, "insert", "a", 1, "placed"),
        (2, "update", "a", 2, "paid"),
        (2, "update", "a", 2, "paid"),  # repeated delivery
        (3, "insert", "b", 1, "placed"),
        (4, "delete", "b", 2, "placed"),
    )
    rows = compaction_rows(pending)
    assert rows.schema == BASE_SCHEMA
    assert summary(rows, "order_id", "order_ts", "status", "amount", "is_deleted") == [
        ("a", at(2), "paid", 2.0, False),
        ("b", at(2), None, None, True),
    ]


def base(*rows: tuple[str, int, str | None, bool]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "order_id": o,
                "order_ts": at(ts),
                "customer_id": None if dead else "c1",
                "amount": None if dead else 1.0,
                "status": status,
                "is_deleted": dead,
                "order_date": at(ts).date(),
            }
            for o, ts, status, dead in rows
        ],
        schema=BASE_SCHEMA,
    )


def test_snapshot_applies_pending_changes_over_the_base():
    current = merge_snapshot(
        base(
            ("a", 1, "placed", False),
            ("b", 1, "placed", False),
            ("c", 5, None, True),
            ("d", 1, "placed", False),
        ),
        changes(
            (10, "update", "a", 2, "paid"),  # newer: wins
            (11, "update", "b", 0, "stale"),  # older than the base row: loses
            (12, "insert", "c", 3, "placed"),  # older than c's tombstone: c stays deleted
            (13, "delete", "d", 4, "placed"),  # deletes d
            (14, "insert", "e", 1, "placed"),  # new order
            (14, "insert", "e", 1, "placed"),  # repeated delivery
        ),
    )
    assert summary(current, "order_id", "order_ts", "status") == [
        ("a", at(2), "paid"),
        ("b", at(1), "placed"),
        ("e", at(1), "placed"),
    ]
    assert current.column_names == ["order_id", "order_ts", "customer_id", "amount", "status", "order_date"]


def test_snapshot_of_the_base_alone_hides_tombstones():
    current = merge_snapshot(base(("a", 1, "placed", False), ("b", 2, None, True)), changes())
    assert summary(current, "order_id") == [("a",)]


def test_tombstone_cutoff_predicate_is_sql_for_both_engines():
    cutoff = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert tombstone_cutoff_predicate(cutoff) == "order_ts < '2026-03-01T12:00:00.000000Z'"
    assert tombstone_cutoff_predicate(cutoff, flag="is_deleted") == (
        "is_deleted AND order_ts < '2026-03-01T12:00:00.000000Z'"
    )
