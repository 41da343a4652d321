"""The ``fraud`` job: bronze transactions -> silver ``transactions`` (scored), ``fraud_alerts``, quarantine.

``python -m jobs fraud --source-table URI --lake URI --checkpoint PATH [--trigger ...]``. Per account, in event
time, a transaction under 1.00 followed within 60 s by one over 500.00 raises one alert
(``jobs.pipelines._fraud_rule``), with state in the checkpoint's RocksDB state store.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from jobs.errors import SettingsError

from jobs.pipelines._fraud_model import FraudModel, scorer
from jobs.pipelines._fraud_state import INPUT_COLUMNS, OUTPUT_SCHEMA, STATE_SCHEMA, detect_frauds

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SCORED_SCHEMA = OUTPUT_SCHEMA + ", fraud_score double"
# Spark's metadata key marking a column as carrying an event-time watermark (EventTimeWatermark.delayKey).
_DELAY_KEY = "spark.watermarkDelayMs"
_WATERMARK_GUARD = "_watermark_guard"
_DELAY = re.compile(r"^\s*(\d+)\s*(second|minute|hour)s?\s*$")
_UNIT_MS = {"second": 1_000, "minute": 60_000, "hour": 3_600_000}


def _delay_ms(delay: str) -> int:
    match = _DELAY.match(delay)
    if match is None:
        raise SettingsError(
            f"--watermark-delay: expected '<N> seconds', '<N> minutes' or '<N> hours', found {delay!r}."
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def detect(transactions: DataFrame, *, watermark_delay: str) -> DataFrame:
    """Per-account detection over parsed transactions; one row per transaction and per alert (``kind``).

    ``transactions`` needs ``account_id``, ``transaction_id``, ``amount``, ``txn_time`` (timestamp),
    ``event_id``, ``event_time``, ``shard_id``, ``sequence_number``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    watermarked = transactions.withWatermark("txn_time", watermark_delay)
    delay_ms = _delay_ms(watermark_delay)
    # Spark drops rows at or behind the watermark before an event-time-timeout state function sees them,
    # matching on the column that carries the watermark's metadata in the grouped input. The input keeps
    # the event time only as `txn_us` (plain microseconds) and carries the watermark on a null column
    # instead, which no row is ever "behind": the watermark still exists (the timeout needs it), and late
    # rows reach the state function, which judges lateness by the same watermark, flags them, and never
    # loses them. tests/jobs/pipelines/test_fraud_stream.py proves late rows arrive.
    guard = F.lit(None).cast("timestamp").alias(_WATERMARK_GUARD, metadata={_DELAY_KEY: delay_ms})
    grouped = watermarked.select(
        *[F.expr("unix_micros(txn_time)").alias(c) if c == "txn_us" else F.col(c) for c in INPUT_COLUMNS],
        guard,
    )
    return grouped.groupBy("account_id").applyInPandasWithState(
        detect_frauds,
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    )


def score(detected: DataFrame, model: FraudModel) -> DataFrame:
    """Add ``fraud_score`` (the model's probability) to every transaction row, in one ``mapInPandas``."""
    return detected.mapInPandas(scorer(model), SCORED_SCHEMA)
