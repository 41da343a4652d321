"""Stream sources for the Spark jobs: Kinesis Data Streams (Spark 4.0's Python Data Source API) and Kafka /
Event Hubs (Spark's own Kafka source, or a Python one where that jar is absent).

The Kinesis names load on first use: the Kinesis source needs Spark 4.0, and importing this package must
work on Synapse's Spark 3.5, where only the Kafka path runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobs.sources._offsets import ShardPosition, StartPosition, StreamOffset, parse_starting_position
from jobs.sources.errors import (
    DataLossError,
    KafkaReadError,
    KinesisReadError,
    SourceError,
    SourceSettingsError,
    StreamAccessError,
    StreamNotFoundError,
)
from jobs.sources.kafka import KafkaSettings, kafka_to_records, read_kafka_stream

if TYPE_CHECKING:
    from jobs.sources.kinesis import (
        KinesisDataSource,
        KinesisSourceSettings,
        read_kinesis_stream,
        read_source_metrics,
    )

_KINESIS = frozenset(
    {"KinesisDataSource", "KinesisSourceSettings", "read_kinesis_stream", "read_source_metrics"}
)


def __getattr__(name: str) -> Any:
    if name in _KINESIS:
        return getattr(importlib.import_module("jobs.sources.kinesis"), name)
    raise AttributeError(f"module 'jobs.sources' has no attribute {name!r}")


__all__ = [
    "DataLossError",
    "KafkaReadError",
    "KafkaSettings",
    "KinesisDataSource",
    "KinesisReadError",
    "KinesisSourceSettings",
    "ShardPosition",
    "SourceError",
    "SourceSettingsError",
    "StartPosition",
    "StreamAccessError",
    "StreamNotFoundError",
    "StreamOffset",
    "kafka_to_records",
    "parse_starting_position",
    "read_kafka_stream",
    "read_kinesis_stream",
    "read_source_metrics",
]
