"""The sales pipeline's per-batch logic in Arrow, pure functions: routing classified bronze rows to silver,
quarantine and the gold delta, adding a gold delta to stored gold rows, and the JSON sink's files.

Spark classifies (parsing is parallel there); one ``jobs.lake.to_arrow`` per micro-batch brings the rows to
the driver, and everything after that is here, so it is tested without Spark.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.pipelines._envelope import INVALID, KIND, OTHER, VALID, quarantine_arrow

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


@dataclass(frozen=True)
class Routed:
    """One micro-batch, routed.

    Attributes:
        silver: new, de-duplicated sales rows (late ones included).
        quarantine: the invalid rows, in the quarantine's shape.
        gold_delta: per product and minute: revenue and sales of the on-time rows, and of the late ones.
        counts: bronze_rows, silver_rows, quarantined, duplicates_removed, other_types, late.
    """

    silver: pa.Table
    quarantine: pa.Table
    gold_delta: pa.Table
    counts: dict[str, int] = field(default_factory=dict)


def _bronze_order(rows: pa.Table) -> pa.Table:
    """Rows in bronze order (shard, then sequence number compared as a number: real ones are 56 digits)."""
    padded = pc.utf8_lpad(rows["sequence_number"].cast(pa.string()), width=64, padding="0")
    keyed = rows.append_column("__seq", padded)
    return keyed.sort_by([("shard_id", "ascending"), ("__seq", "ascending")]).drop_columns(["__seq"])


def _first_per_event(valid: pa.Table) -> pa.Table:
    """The first delivery of each event_id in bronze order."""
    ordered = _bronze_order(valid)
    indexed = ordered.append_column("__i", pa.array(range(ordered.num_rows), pa.int64()))
    firsts = indexed.group_by("event_id", use_threads=False).aggregate([("__i", "min")])
    keep = pc.sort_indices(firsts["__i_min"])
    return ordered.take(pc.take(firsts["__i_min"], keep))


def route(
    rows: pa.Table,
    *,
    seen: Collection[str],
    watermark: datetime | None,
    batch_id: int,
    now: datetime,
) -> Routed:
    """Route one classified micro-batch.

    Args:
        rows: the batch: bronze position, the envelope's typed columns, ``_kind``, ``_reason``, and ``data``
            (needed on invalid rows only).
        seen: event ids already in silver within the de-duplication window.
        watermark: rows whose ``sales_datetime`` is before it are late: kept in silver, counted, and added to
            gold's ``late_*`` columns instead of its revenue (None: nothing is late yet).
        batch_id: the micro-batch.
        now: the processing time (``event_processing_time``, ``quarantined_at``).
    """
    kinds = rows[KIND]
    valid = rows.filter(pc.equal(kinds, pa.scalar(VALID)))
    unique = _first_per_event(valid) if valid.num_rows else valid
    if seen and unique.num_rows:
        unique = unique.filter(
            pc.invert(pc.is_in(unique["event_id"], value_set=pa.array(list(seen), pa.string())))
        )
    n = unique.num_rows
    silver = pa.Table.from_arrays(
        [
            unique["sales_id"].cast(pa.int64()),
            unique["product_name"].cast(pa.string()),
            unique["sales_datetime"].cast(UTC_US),
            unique["sales_amount"].cast(AMOUNT),
            unique["event_id"].cast(pa.string()),
            unique["event_time"].cast(UTC_US),
            pa.array([now] * n, UTC_US),
            unique["shard_id"].cast(pa.string()),
            unique["sequence_number"].cast(pa.string()),
        ],
        schema=SILVER_SCHEMA,
    )
    late = (
        pc.less(silver["sales_datetime"], pa.scalar(watermark, UTC_US))
        if watermark is not None
        else pa.array([False] * n, pa.bool_())
    )
    quarantine = quarantine_arrow(rows, batch_id, now)
    counts = {
        "bronze_rows": rows.num_rows,
        "silver_rows": n,
        "quarantined": quarantine.num_rows,
        "duplicates_removed": valid.num_rows - n,
        "other_types": _true(pc.equal(kinds, pa.scalar(OTHER))),
        "late": _true(late),
    }
    assert _true(pc.equal(kinds, pa.scalar(INVALID))) == counts["quarantined"]
    return Routed(silver, quarantine, gold_delta(silver, late), counts)


def _true(mask: Any) -> int:
    return int(pc.sum(mask.cast(pa.int64())).as_py() or 0)


def gold_delta(silver: pa.Table, late: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Revenue and sales per product and event-time minute; late rows in ``late_*`` instead."""
    amount = silver["sales_amount"].cast(TOTAL)
    zero = pa.scalar(Decimal("0.00"), TOTAL)
    frame = pa.table(
        {
            "product_name": silver["product_name"],
            "minute": pc.floor_temporal(silver["sales_datetime"], unit="minute"),
            "revenue": pc.if_else(late, zero, amount),
            "sales": pc.if_else(late, 0, 1).cast(pa.int64()),
            "late_revenue": pc.if_else(late, amount, zero),
            "late_sales": pc.if_else(late, 1, 0).cast(pa.int64()),
        }
    )
    summed = frame.group_by(list(GOLD_KEYS), use_threads=False).aggregate(
        [(c, "sum") for c in _DELTA_COLUMNS]
    )
    return pa.table(
        {
            "product_name": summed["product_name"],
            "minute": summed["minute"].cast(UTC_US),
            **{c: summed[f"{c}_sum"].cast(GOLD_SCHEMA.field(c).type) for c in _DELTA_COLUMNS},
        }
    ).sort_by([(k, "ascending") for k in GOLD_KEYS])


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


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, Decimal):
        return float(value)  # two decimals round-trip exactly through the shortest float repr
    return value


def json_files(silver: pa.Table, batch_id: int) -> dict[str, bytes]:
    """Silver rows as newline-delimited JSON, one file per event date and hour, named after the batch.

    ``event_date=YYYY-MM-DD/event_hour=HH/batch-<id>.json``: a replayed batch writes the same names, so it
    overwrites instead of duplicating.
    """
    files: dict[str, list[str]] = {}
    for row in silver.to_pylist():
        moment: datetime = row["event_time"]
        name = f"event_date={moment:%Y-%m-%d}/event_hour={moment:%H}/batch-{batch_id:010d}.json"
        files.setdefault(name, []).append(
            json.dumps({k: _json_value(v) for k, v in row.items()}, separators=(",", ":"))
        )
    return {name: ("\n".join(lines) + "\n").encode() for name, lines in files.items()}


def dedup_cutoff(valid: pa.Table, window: timedelta) -> datetime | None:
    """The earliest event time a batch's duplicates can have in silver: its earliest valid event, less the window."""
    times = valid["event_time"]
    earliest = pc.min(times).as_py() if len(times) else None
    return None if earliest is None else earliest - window
