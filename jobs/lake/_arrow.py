"""Arrow helpers shared by the engines: a DataFrame's Arrow, timestamp normalisation, schema checks, MERGE
source preparation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import Schema as DeltaSchema

from jobs.lake.engine import Filter, LakeTable, SchemaMode
from jobs.lake.errors import LakeError, TableSchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_UTC_MICROS = pa.timestamp("us", tz="UTC")


def to_arrow(frame: DataFrame) -> pa.Table:
    """Collect ``frame`` to the driver as one Arrow table: ``DataFrame.toArrow()`` where Spark has it (4.0),
    else the private ``_collect_as_arrow()`` it wraps (Spark 3.5, e.g. Synapse).

    Every Arrow a job moves out of Spark goes through here, so the Azure path never meets a 4.0-only call.
    On 3.5 an empty result has no batches: the table then gets the schema Spark's own Arrow conversion
    gives (timestamps are normalised later by the writers, whichever time zone the session reports).
    """
    # Asked of the class: a DataFrame answers unknown attributes with its columns.
    if hasattr(type(frame), "toArrow"):
        return frame.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    # mypy reads any attribute of a DataFrame as a column; this one is the 3.5 method toArrow wraps in 4.0.
    batches = cast("Any", frame)._collect_as_arrow()
    if not batches:
        return to_arrow_schema(frame.schema).empty_table()
    return pa.Table.from_batches(batches)


def rows_for(table: LakeTable, frame: DataFrame) -> pa.Table | DataFrame:
    """``frame`` as ``table``'s engine takes it: the DataFrame itself where the executors write it (delta-spark),
    else its rows collected to the driver as Arrow (delta-rs: only tables on Azurite)."""
    return frame if table.engine.accepts_frames else to_arrow(frame)


def normalize_timestamps(data: pa.Table) -> pa.Table:
    """Make every top-level timestamp column microseconds, UTC.

    Delta's ``timestamp`` type is time-zone-aware microseconds. A naive column would become
    ``timestamp_ntz``, a table feature (writer 7) that Delta 3.2 readers such as Synapse reject, and
    nanoseconds have no Delta type. Naive values are taken as UTC, which is what the session time zone is.
    """
    columns = []
    changed = False
    for column in data.columns:
        if pa.types.is_timestamp(column.type) and column.type != _UTC_MICROS:
            # ns -> us truncates sub-microsecond digits, which Delta cannot store anyway.
            column = pc.cast(column, _UTC_MICROS, safe=False)
            changed = True
        columns.append(column)
    if not changed:
        return data
    fields = [
        pa.field(f.name, c.type, f.nullable, f.metadata) for f, c in zip(data.schema, columns, strict=True)
    ]
    metadata = cast("dict[bytes | str, bytes | str] | None", data.schema.metadata)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=metadata))


def delta_types(schema: pa.Schema | DeltaSchema) -> dict[str, str]:
    """Map column name -> Delta type name (``long``, ``string``, ``timestamp``, nested types spelled out)."""
    delta_schema = schema if isinstance(schema, DeltaSchema) else DeltaSchema.from_arrow(schema)
    return {f.name: _type_name(f.type) for f in delta_schema.fields}


def _type_name(delta_type: object) -> str:
    text = str(delta_type)
    # PrimitiveType("long") -> long; complex types keep their structure, which is what a person compares.
    if text.startswith('PrimitiveType("') and text.endswith('")'):
        return text[len('PrimitiveType("') : -2]
    return text


def schema_diff(
    table: dict[str, str], data: dict[str, str]
) -> tuple[list[str], list[str], list[tuple[str, str, str]]]:
    """Return (missing from data, extra in data, (column, table type, data type) changed)."""
    missing = [name for name in table if name not in data]
    extra = [name for name in data if name not in table]
    changed = [
        (name, table[name], data[name]) for name in table if name in data and table[name] != data[name]
    ]
    return missing, extra, changed


def check_schema(table_uri: str, table: pa.Schema | DeltaSchema, data: pa.Schema, mode: SchemaMode) -> None:
    """Raise ``TableSchemaError`` when ``data`` does not fit the ``table`` schema.

    Strict mode rejects any difference; merge mode rejects only a changed column type.
    """
    missing, extra, changed = schema_diff(delta_types(table), delta_types(data))
    if changed or (mode == "strict" and (missing or extra)):
        raise TableSchemaError(
            table_uri,
            missing=missing if mode == "strict" else (),
            extra=extra if mode == "strict" else (),
            changed=changed,
        )


def merge_source(
    data: pa.Table, keys: Sequence[str], precombine: str, delete_column: str | None
) -> tuple[pa.Table, list[str]]:
    """Prepare a MERGE source: timestamps normalised, null delete flags read as false, one row per key.

    Returns the source and the columns to store (all but ``delete_column``).
    """
    source = normalize_timestamps(data)
    if delete_column:
        flags = cast(
            "pa.ChunkedArray[Any]", pc.fill_null(source[delete_column].cast(pa.bool_()), pa.scalar(False))
        )
        source = source.set_column(source.column_names.index(delete_column), delete_column, flags)
    source = latest_per_key(source, keys, precombine)
    return source, [c for c in source.column_names if c != delete_column]


def latest_per_key(data: pa.Table, keys: Sequence[str], precombine: str) -> pa.Table:
    """Keep one row per key: the highest ``precombine`` value, and among equals the last one in the batch.

    Rows whose ``precombine`` is null lose to any non-null row of the same key.
    """
    if data.num_rows == 0:
        return data
    order = "__lakestack_row"
    indexed = data.append_column(order, pa.array(range(data.num_rows), pa.int64()))
    ranked = indexed.sort_by(
        [(k, "ascending") for k in keys] + [(precombine, "descending"), (order, "descending")]
    )
    # Nulls in precombine must sort last within a key; sort_by puts nulls at the end for descending too,
    # so the first row of each key group is the winner.
    firsts = ranked.group_by(list(keys), use_threads=False).aggregate([(order, "first")])
    winners = pc.sort_indices(firsts[f"{order}_first"])
    rows = pc.take(firsts[f"{order}_first"], winners)
    return data.take(rows)


_COMPARISONS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_SET_OPS = ("in", "not in")


def check_filters(table_uri: str, filters: Sequence[Filter]) -> None:
    """Raise ``LakeError`` naming the first filter that is not ``(column, op, value)`` with a known op."""
    for item in filters:
        ok = isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str)
        if not ok or (item[1] not in _COMPARISONS and item[1] not in _SET_OPS):
            raise LakeError(
                f"read of {table_uri}: expected filters as (column, op, value) with op one of "
                f"{', '.join([*_COMPARISONS, *_SET_OPS])}, found {item!r}."
            )
        if item[1] in _SET_OPS and isinstance(item[2], str | bytes):
            raise LakeError(
                f"read of {table_uri}: filter {item!r} needs a list of values for {item[1]!r}, found one string."
            )


def filter_expression(filters: Sequence[Filter]) -> pc.Expression:
    """The conjunction of ``(column, op, value)`` filters as a pyarrow dataset expression."""
    expression: pc.Expression | None = None
    for name, op, value in filters:
        column = pc.field(name)
        if op in _SET_OPS:
            test = column.isin(list(value))
            if op == "not in":
                test = ~test
        else:
            test = {
                "=": column == value,
                "!=": column != value,
                "<": column < value,
                "<=": column <= value,
                ">": column > value,
                ">=": column >= value,
            }[op]
        expression = test if expression is None else expression & test
    assert expression is not None  # filters is not empty
    return expression


def apply_filters(data: pa.Table, filters: Sequence[Filter]) -> pa.Table:
    """Keep the rows of ``data`` that pass every ``(column, op, value)`` filter (nulls never pass)."""
    mask: Any = None
    for name, op, value in filters:
        column = data[name]
        if pa.types.is_string_view(column.type):
            column = pc.cast(column, pa.string())
        test: Any
        if op in _SET_OPS:
            test = pc.is_in(column, value_set=pa.array(list(value), column.type))
            if op == "not in":
                test = pc.invert(test)
        else:
            test = _COMPARISONS[op](column, pa.scalar(value, column.type))
        test = pc.fill_null(test, pa.scalar(False))
        mask = test if mask is None else pc.and_(mask, test)
    return data if mask is None else data.filter(mask)
