"""The one classification every pipeline applies to bronze rows (contract C1), and the quarantine's shape (C2).

A stream and its bronze table may hold every scenario's events. Each pipeline reads bronze and, per row:

- a JSON object whose ``event_type`` is its own: parsed with its explicit schema -> ``valid``, or ``invalid``
  with a reason naming each field that is missing, of the wrong type or impossible;
- a JSON object whose ``event_type`` is another known scenario: ``other`` (not its business, counted, never
  quarantined);
- anything else (not UTF-8, not JSON, not an object, no or unknown ``event_type``): ``invalid``, with a reason.

Invariant per pipeline: bronze rows = silver rows + quarantined + duplicates removed + ``other``.

Usage (any pipeline)::

    ENVELOPE = Envelope("sales", (Field("sales_id", "SalesId", "bigint", rule="{} > 0", expects="a positive id"),))
    rows = classify(bronze_df, ENVELOPE)          # bronze columns + event_id, event_time, typed fields,
                                                  # _kind ('valid' | 'other' | 'invalid'), _reason
    bad = quarantine_rows(rows, batch_id)         # the C2 quarantine rows of one micro-batch
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from jobs.errors import SettingsError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

KNOWN_EVENT_TYPES: tuple[str, ...] = ("sales", "transactions", "orders")
KIND = "_kind"
REASON = "_reason"
VALID: Literal["valid"] = "valid"
OTHER: Literal["other"] = "other"
INVALID: Literal["invalid"] = "invalid"
_CORRUPT = "_corrupt_record"
_SHOWN_CHARS = 40

_QUARANTINE_FIELDS: list[pa.Field[Any]] = [
    pa.field("data", pa.binary()),
    pa.field("shard_id", pa.string()),
    pa.field("sequence_number", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("quarantined_at", pa.timestamp("us", tz="UTC")),
    pa.field("batch_id", pa.int64()),
]
QUARANTINE_SCHEMA = pa.schema(_QUARANTINE_FIELDS)
QUARANTINE_COLUMNS: tuple[str, ...] = tuple(QUARANTINE_SCHEMA.names)


def quarantine_table(lake: str, table: str) -> str:
    """``<lake>/<table>_quarantine``: where a pipeline's rejected bronze rows go (e.g. ``sales_quarantine``)."""
    return f"{lake.rstrip('/')}/{table}_quarantine"


@dataclass(frozen=True)
class Field:
    """One payload field a pipeline reads.

    Attributes:
        name: the output column (snake_case).
        key: the JSON key in the payload (e.g. ``SalesAmount``).
        type: Spark SQL type of the output column (``bigint``, ``string``, ``timestamp``, ``decimal(12,2)``).
        required: a missing (or null) key makes the row invalid.
        rule: SQL predicate over the typed value, ``{}`` standing for it (``"{} > 0"``); false -> invalid.
        expects: what the rule expects, in words, for the reason (``"a positive amount"``).
    """

    name: str
    key: str
    type: str
    required: bool = True
    rule: str | None = None
    expects: str | None = None


EVENT_ID = Field("event_id", "event_id", "string", rule="length(trim({})) > 0", expects="a non-empty id")
EVENT_TIME = Field("event_time", "event_time", "timestamp")


@dataclass(frozen=True)
class Envelope:
    """What one pipeline reads from bronze: its ``event_type`` and its payload fields.

    ``event_id`` and ``event_time`` (every event carries them) come first, before ``fields``.
    """

    event_type: str
    fields: tuple[Field, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.event_type not in KNOWN_EVENT_TYPES:
            raise SettingsError(
                f"envelope: expected an event_type in {', '.join(KNOWN_EVENT_TYPES)}, found {self.event_type!r}."
            )
        names = [f.name for f in self.all_fields]
        clashes = sorted({n for n in names if names.count(n) > 1} | ({KIND, REASON} & set(names)))
        if clashes:
            raise SettingsError(
                f"envelope {self.event_type}: output columns {clashes} appear twice or are reserved."
            )

    @property
    def all_fields(self) -> tuple[Field, ...]:
        return (EVENT_ID, EVENT_TIME, *self.fields)

    @property
    def columns(self) -> list[str]:
        """The typed columns :func:`classify` adds."""
        return [f.name for f in self.all_fields]


def _payload_schema(envelope: Envelope) -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    # Every key as a string: the JSON parser turns numbers, booleans and nested values into their text, so a
    # wrong type is seen field by field (try_cast) instead of blanking the whole record.
    keys = ["event_type", *dict.fromkeys(f.key for f in envelope.all_fields)]
    return StructType([StructField(k, StringType()) for k in keys] + [StructField(_CORRUPT, StringType())])


def _shown(raw: Column) -> Column:
    from pyspark.sql import functions as F

    return F.concat(F.lit("'"), F.substring(raw, 1, _SHOWN_CHARS), F.lit("'"))


def _field_problem(spec: Field, raw: Column, typed: Column) -> Column:
    """Null when the field is fine, else a reason naming it."""
    from pyspark.sql import functions as F

    missing = F.lit(f"field {spec.key} is missing") if spec.required else F.lit(None)
    problem = F.when(raw.isNull(), missing).when(
        typed.isNull(), F.concat(F.lit(f"field {spec.key}: expected {spec.type}, found "), _shown(raw))
    )
    if spec.rule is not None:
        holds = F.expr(spec.rule.replace("{}", f"`__typed_{spec.name}`"))
        problem = problem.when(
            ~F.coalesce(holds, F.lit(False)),
            F.concat(F.lit(f"field {spec.key}: expected {spec.expects or spec.rule}, found "), _shown(raw)),
        )
    return problem


def _utf8_ok(spark_version: str) -> Column:
    from pyspark.sql import functions as F

    if int(spark_version.split(".")[0]) >= 4:
        return F.expr("is_valid_utf8(cast(data as string))")
    # Spark 3.5 (Synapse): decoding replaces bad bytes with U+FFFD, so the round trip differs from the input.
    return F.encode(F.decode(F.col("data"), "UTF-8"), "UTF-8") == F.col("data")


def classify(bronze: DataFrame, envelope: Envelope) -> DataFrame:
    """Bronze rows with their class (contract C1): the input columns, the envelope's typed columns,
    ``_kind`` (``valid`` | ``other`` | ``invalid``) and ``_reason`` (null unless invalid).

    A pure DataFrame transform (batch or streaming); ``data`` must be the raw payload bytes.
    """
    from pyspark.sql import functions as F

    text = F.col("data").cast("string")
    parsed = F.from_json(text, _payload_schema(envelope), {"columnNameOfCorruptRecord": _CORRUPT})
    frame = bronze.withColumn("__p", parsed)
    for spec in envelope.all_fields:
        frame = frame.withColumn(f"__typed_{spec.name}", F.expr(f"try_cast(__p.`{spec.key}` as {spec.type})"))
    problems = [
        _field_problem(spec, F.col("__p").getField(spec.key), F.col(f"__typed_{spec.name}"))
        for spec in envelope.all_fields
    ]
    own_reason = F.concat_ws("; ", *problems)
    event_type = F.col("__p.event_type")
    others = [t for t in KNOWN_EVENT_TYPES if t != envelope.event_type]
    reason = (
        F.when(~_utf8_ok(bronze.sparkSession.version), F.lit("payload is not valid UTF-8"))
        .when(~F.ltrim(text).startswith("{"), F.concat(F.lit("payload is not a JSON object: "), _shown(text)))
        .when(F.col(f"__p.{_CORRUPT}").isNotNull(), F.lit("payload is not valid JSON"))
        .when(event_type.isNull(), F.lit("event_type is missing"))
        .when(event_type == envelope.event_type, F.when(own_reason != "", own_reason))
        .when(event_type.isin(*others), F.lit(None))
        .otherwise(
            F.concat(
                F.lit("event_type "),
                _shown(event_type),
                F.lit(f" is not a known scenario ({', '.join(KNOWN_EVENT_TYPES)})"),
            )
        )
    )
    kind = (
        F.when(F.col(REASON).isNotNull(), F.lit(INVALID))
        .when(event_type == envelope.event_type, F.lit(VALID))
        .otherwise(F.lit(OTHER))
    )
    typed = [F.col(f"__typed_{spec.name}").alias(spec.name) for spec in envelope.all_fields]
    return (
        frame.withColumn(REASON, reason)
        .withColumn(KIND, kind)
        .select(*[F.col(c) for c in bronze.columns], *typed, F.col(KIND), F.col(REASON))
    )


def quarantine_rows(classified: DataFrame, batch_id: int, *, now: datetime | None = None) -> DataFrame:
    """The quarantine rows (contract C2) of one classified micro-batch: its ``invalid`` rows."""
    from pyspark.sql import functions as F

    moment = F.lit(now) if now is not None else F.current_timestamp()
    return classified.filter(F.col(KIND) == INVALID).select(
        F.col("data"),
        F.col("shard_id"),
        F.col("sequence_number"),
        F.col(REASON).alias("reason"),
        moment.cast("timestamp").alias("quarantined_at"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )


def quarantine_arrow(rows: pa.Table, batch_id: int, now: datetime) -> pa.Table:
    """The quarantine rows (contract C2) of the ``invalid`` rows of a classified batch already in Arrow."""
    import pyarrow.compute as pc

    bad = rows.filter(pc.equal(rows[KIND], pa.scalar(INVALID)))
    n = bad.num_rows
    return pa.Table.from_arrays(
        [
            bad["data"].cast(pa.binary()),
            bad["shard_id"].cast(pa.string()),
            bad["sequence_number"].cast(pa.string()),
            bad[REASON].cast(pa.string()),
            pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            pa.array([batch_id] * n, pa.int64()),
        ],
        schema=QUARANTINE_SCHEMA,
    )


def count_kinds(kinds: Sequence[str | None]) -> dict[str, int]:
    """``{'valid': n, 'other': n, 'invalid': n}`` of a batch's ``_kind`` values."""
    counts = {VALID: 0, OTHER: 0, INVALID: 0}
    for kind in kinds:
        counts[kind or INVALID] += 1
    return counts
