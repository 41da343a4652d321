"""The sales pipeline's routing in Arrow, without Spark: silver, quarantine, duplicates, late rows, gold."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa

from jobs.pipelines._envelope import KIND, REASON
from jobs.pipelines._sales_route import (
    GOLD_SCHEMA,
    SILVER_SCHEMA,
    add_to_gold,
    dedup_cutoff,
    json_files,
    route,
)

NOW = datetime(2026, 1, 2, 4, 0, tzinfo=UTC)


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 2, 3, minute, second, tzinfo=UTC)


def rows(*specs: tuple) -> pa.Table:
    """(shard, seq, kind, event_id, product, minute, cents) per row; invalid rows carry a payload and reason."""
    columns: dict[str, list] = {
        k: []
        for k in (
            "shard_id",
            "sequence_number",
            "data",
            "event_id",
            "event_time",
            "sales_id",
            "product_name",
            "sales_datetime",
            "sales_amount",
            KIND,
            REASON,
        )
    }
    for shard, seq, kind, event_id, product, minute, cents in specs:
        valid = kind == "valid"
        moment = at(minute) if minute is not None else None
        values = {
            "shard_id": shard,
            "sequence_number": seq,
            "data": None if valid else b"{bad",
            "event_id": event_id,
            "event_time": moment,
            "sales_id": 1 if valid else None,
            "product_name": product,
            "sales_datetime": moment,
            "sales_amount": Decimal(cents) / 100 if cents is not None else None,
            KIND: kind,
            REASON: None if kind != "invalid" else "payload is not valid JSON",
        }
        for key, value in values.items():
            columns[key].append(value)
    types = {
        "data": pa.binary(),
        "event_time": pa.timestamp("us", tz="UTC"),
        "sales_datetime": pa.timestamp("us", tz="UTC"),
        "sales_amount": pa.decimal128(12, 2),
        "sales_id": pa.int64(),
    }
    return pa.table({k: pa.array(v, types.get(k, pa.string())) for k, v in columns.items()})


BATCH = rows(
    ("shardId-1", "10", "valid", "e1", "Bike", 4, 1000),
    ("shardId-0", "9", "valid", "e2", "Bike", 4, 250),
    ("shardId-0", "10", "valid", "e1", "Bike", 4, 1000),  # redelivered: the later position is the duplicate
    ("shardId-0", "11", "invalid", None, None, None, None),
    ("shardId-1", "11", "other", "o1", None, None, None),
    ("shardId-1", "12", "valid", "e3", "Lock", 1, 500),  # before the watermark: late
    ("shardId-1", "13", "valid", "e9", "Pump", 5, 100),  # already in silver
)


def test_a_batch_is_routed_with_every_row_accounted_for():
    routed = route(BATCH, seen={"e9"}, watermark=at(2), batch_id=3, now=NOW)
    assert routed.counts == {
        "bronze_rows": 7,
        "silver_rows": 3,
        "quarantined": 1,
        "duplicates_removed": 2,
        "other_types": 1,
        "late": 1,
    }
    c = routed.counts
    assert (
        c["bronze_rows"] == c["silver_rows"] + c["quarantined"] + c["duplicates_removed"] + c["other_types"]
    )
    assert routed.silver.schema == SILVER_SCHEMA
    assert [(r["event_id"], r["shard_id"], r["sequence_number"]) for r in routed.silver.to_pylist()] == [
        ("e2", "shardId-0", "9"),
        ("e1", "shardId-0", "10"),
        ("e3", "shardId-1", "12"),
    ]
    assert {r["event_processing_time"] for r in routed.silver.to_pylist()} == {NOW}
    assert [(r["sequence_number"], r["reason"], r["batch_id"]) for r in routed.quarantine.to_pylist()] == [
        ("11", "payload is not valid JSON", 3)
    ]
    assert routed.gold_delta.to_pylist() == [
        {
            "product_name": "Bike",
            "minute": at(4),
            "revenue": Decimal("12.50"),
            "sales": 2,
            "late_revenue": Decimal("0.00"),
            "late_sales": 0,
        },
        {
            "product_name": "Lock",
            "minute": at(1),
            "revenue": Decimal("0.00"),
            "sales": 0,
            "late_revenue": Decimal("5.00"),
            "late_sales": 1,
        },
    ]


def test_sequence_numbers_order_as_numbers_not_text():
    batch = rows(("s", "100", "valid", "e", "Bike", 4, 100), ("s", "99", "valid", "e", "Bike", 4, 100))
    (kept,) = route(batch, seen=set(), watermark=None, batch_id=0, now=NOW).silver.to_pylist()
    assert kept["sequence_number"] == "99"


def test_gold_adds_to_what_is_stored_and_keeps_untouched_minutes_out():
    stored = pa.table(
        {
            "product_name": ["Bike", "Pump"],
            "minute": pa.array([at(4), at(5)], pa.timestamp("us", tz="UTC")),
            "revenue": pa.array([Decimal("1.00"), Decimal("9.00")], pa.decimal128(18, 2)),
            "sales": [1, 9],
            "late_revenue": pa.array([Decimal("0.00")] * 2, pa.decimal128(18, 2)),
            "late_sales": [0, 0],
            "updated_batch": [1, 1],
            "updated_at": pa.array([NOW, NOW], pa.timestamp("us", tz="UTC")),
        },
        schema=GOLD_SCHEMA,
    )
    delta = route(BATCH, seen={"e9"}, watermark=at(2), batch_id=3, now=NOW).gold_delta
    updated = add_to_gold(stored, delta, batch_id=3, now=NOW)
    assert updated.schema == GOLD_SCHEMA
    assert [
        (
            r["product_name"],
            r["minute"].minute,
            str(r["revenue"]),
            r["sales"],
            str(r["late_revenue"]),
            r["late_sales"],
            r["updated_batch"],
        )
        for r in updated.to_pylist()
    ] == [
        ("Bike", 4, "13.50", 3, "0.00", 0, 3),
        ("Lock", 1, "0.00", 0, "5.00", 1, 3),
    ]
    assert add_to_gold(stored, delta.slice(0, 0), batch_id=3, now=NOW).num_rows == 0


def test_json_files_are_named_by_event_hour_and_batch():
    batch = rows(("s", "1", "valid", "a", "Bike", 4, 1234), ("s", "2", "valid", "b", "Lock", 5, 99))
    silver = route(batch, seen=set(), watermark=None, batch_id=12, now=NOW).silver
    files = json_files(silver, 12)
    assert list(files) == ["event_date=2026-01-02/event_hour=03/batch-0000000012.json"]
    lines = [
        json.loads(line)
        for line in files["event_date=2026-01-02/event_hour=03/batch-0000000012.json"].splitlines()
    ]
    assert lines[0] == {
        "sales_id": 1,
        "product_name": "Bike",
        "sales_datetime": "2026-01-02T03:04:00.000000Z",
        "sales_amount": 12.34,
        "event_id": "a",
        "event_time": "2026-01-02T03:04:00.000000Z",
        "event_processing_time": "2026-01-02T04:00:00.000000Z",
        "shard_id": "s",
        "sequence_number": "1",
    }
    assert lines[1]["sales_amount"] == 0.99


def test_the_duplicate_window_reaches_back_from_the_earliest_event():
    batch = rows(("s", "1", "valid", "a", "Bike", 4, 1), ("s", "2", "valid", "b", "Bike", 2, 1))
    assert dedup_cutoff(batch, timedelta(minutes=10)) == at(2) - timedelta(minutes=10)
    assert dedup_cutoff(batch.slice(0, 0), timedelta(minutes=10)) is None
