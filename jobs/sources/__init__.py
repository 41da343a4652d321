"""Stream sources for the Spark jobs: Kinesis Data Streams and Delta tables (Spark 4.0's Python Data Source
API) and Kafka / Event Hubs (Spark's own Kafka source, or a Python one where that jar is absent).

The Kinesis and Delta names load on first use: those sources need Spark 4.0, and importing this package must
work on Synapse's Spark 3.5, where only the Kafka path runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobs.sources._delta_offsets import DeltaOffset
from jobs.sources._kinesis_preflight import check_kinesis_stream
from jobs.sources._offsets import ShardPosition, StartPosition, StreamOffset, parse_starting_position
from jobs.sources.errors import (
    ChangeCommitError,
    DataLossError,
    DeltaLogError,
    DeltaSourceError,
    DeltaTableNotFoundError,
    KafkaReadError,
    KinesisReadError,
    MissingDataFileError,
    SourceError,
    SourceSettingsError,
    StreamAccessError,
    StreamNotFoundError,
)
from jobs.sources.kafka import KafkaSettings, kafka_to_records, read_kafka_stream

if TYPE_CHECKING:
    from jobs.sources.delta import DeltaDataSource, DeltaSourceSettings, read_delta, read_delta_stream
    from jobs.sources.kinesis import (
        KinesisDataSource,
        KinesisSourceSettings,
        read_kinesis_stream,
        read_source_metrics,
    )

_LAZY = {
    **dict.fromkeys(
        ("KinesisDataSource", "KinesisSourceSettings", "read_kinesis_stream", "read_source_metrics"),
        "jobs.sources.kinesis",
    ),
    **dict.fromkeys(
        ("DeltaDataSource", "DeltaSourceSettings", "read_delta", "read_delta_stream"), "jobs.sources.delta"
    ),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jobs.sources' has no attribute {name!r}")


__all__ = [
    "ChangeCommitError",
    "DataLossError",
    "DeltaDataSource",
    "DeltaLogError",
    "DeltaOffset",
    "DeltaSourceError",
    "DeltaSourceSettings",
    "DeltaTableNotFoundError",
    "KafkaReadError",
    "KafkaSettings",
    "KinesisDataSource",
    "KinesisReadError",
    "KinesisSourceSettings",
    "MissingDataFileError",
    "ShardPosition",
    "SourceError",
    "SourceSettingsError",
    "StartPosition",
    "StreamAccessError",
    "StreamNotFoundError",
    "StreamOffset",
    "check_kinesis_stream",
    "kafka_to_records",
    "parse_starting_position",
    "read_delta",
    "read_delta_stream",
    "read_kafka_stream",
    "read_kinesis_stream",
    "read_source_metrics",
]
