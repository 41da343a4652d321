"""Gold's additive update in Arrow (gold on the Azurite emulator, merged from the driver by delta-rs)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa

from jobs.pipelines._sales_route import GOLD_SCHEMA, add_to_gold

NOW = datetime(2026, 1, 2, 4, 0, tzinfo=UTC)
UTC_US = pa.timestamp("us", tz="UTC")
TOTAL = pa.decimal128(18, 2)


def at(minute: int) -> datetime:
    return datetime(2026, 1, 2, 3, minute, tzinfo=UTC)


def test_gold_adds_to_what_is_stored_and_keeps_untouched_minutes_out():
    stored = pa.table(
        {
            "product_name": ["Bike", "Pump"],
            "minute": pa.array([at(4), at(5)], UTC_US),
            "revenue": pa.array([Decimal("1.00"), Decimal("9.00")], TOTAL),
            "sales": [1, 9],
            "late_revenue": pa.array([Decimal("0.00")] * 2, TOTAL),
            "late_sales": [0, 0],
            "updated_batch": [1, 1],
            "updated_at": pa.array([NOW, NOW], UTC_US),
        },
        schema=GOLD_SCHEMA,
    )
    # A batch's delta: Bike at minute 4 on time (two sales), a late Lock sale at minute 1 (not stored yet).
    delta = pa.table(
        {
            "product_name": ["Bike", "Lock"],
            "minute": pa.array([at(4), at(1)], UTC_US),
            "revenue": pa.array([Decimal("12.50"), Decimal("0.00")], TOTAL),
            "sales": pa.array([2, 0], pa.int64()),
            "late_revenue": pa.array([Decimal("0.00"), Decimal("5.00")], TOTAL),
            "late_sales": pa.array([0, 1], pa.int64()),
        }
    )
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
