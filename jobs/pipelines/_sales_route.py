"""The sales pipeline's table shapes, and gold's additive update in Arrow (for gold on the Azurite emulator, which
delta-rs writes from the driver; elsewhere delta-spark MERGEs gold on the executors).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

UTC_US = pa.timestamp("us", tz="UTC")
AMOUNT = pa.decimal128(12, 2)
TOTAL = pa.decimal128(18, 2)

_SILVER_FIELDS: list[pa.Field[Any]] = [
    pa.field("sales_id", pa.int64()),
    pa.field("product_name", pa.string()),
    pa.field("sales_datetime", UTC_US),
    pa.field("sales_amount", AMOUNT),
    pa.field("event_id", pa.string()),
    pa.field("event_time", UTC_US),
    pa.field("event_processing_time", UTC_US),
    pa.field("shard_id", pa.string()),
    pa.field("sequence_number", pa.string()),
]
SILVER_SCHEMA = pa.schema(_SILVER_FIELDS)
GOLD_KEYS: tuple[str, ...] = ("product_name", "minute")
_GOLD_FIELDS: list[pa.Field[Any]] = [
    pa.field("product_name", pa.string()),
    pa.field("minute", UTC_US),
    pa.field("revenue", TOTAL),
    pa.field("sales", pa.int64()),
    pa.field("late_revenue", TOTAL),
    pa.field("late_sales", pa.int64()),
    pa.field("updated_batch", pa.int64()),
    pa.field("updated_at", UTC_US),
]
GOLD_SCHEMA = pa.schema(_GOLD_FIELDS)
_DELTA_COLUMNS = ("revenue", "sales", "late_revenue", "late_sales")


def add_to_gold(stored: pa.Table, delta: pa.Table, *, batch_id: int, now: datetime) -> pa.Table:
    """The gold rows the delta touches, with the stored values added: what the MERGE writes."""
    if delta.num_rows == 0:
        return GOLD_SCHEMA.empty_table()
    before = stored.select([*GOLD_KEYS, *_DELTA_COLUMNS]).rename_columns(
        [*GOLD_KEYS, *[f"__old_{c}" for c in _DELTA_COLUMNS]]
    )
    joined = delta.join(before, keys=list(GOLD_KEYS), join_type="left outer")
    columns: dict[str, Any] = {k: joined[k] for k in GOLD_KEYS}
    for column in _DELTA_COLUMNS:
        kind = GOLD_SCHEMA.field(column).type
        old = pc.fill_null(
            joined[f"__old_{column}"].cast(kind),
            pa.scalar(0, kind) if kind == pa.int64() else pa.scalar(Decimal("0.00"), kind),
        )
        columns[column] = pc.add(joined[column].cast(kind), old).cast(kind)
    columns["updated_batch"] = pa.array([batch_id] * joined.num_rows, pa.int64())
    columns["updated_at"] = pa.array([now] * joined.num_rows, UTC_US)
    return pa.table(columns, schema=GOLD_SCHEMA).sort_by([(k, "ascending") for k in GOLD_KEYS])
