"""Stream sources for the Spark jobs: Kinesis Data Streams (Spark 4's Python Data Source API), Kafka / Event
Hubs (Spark's own Kafka source) and Delta tables (Spark's own Delta source where its jars load, a Python one
elsewhere).

The Kinesis and Python Delta source names load on first use: those sources need Spark 4, and importing this
package must work on Synapse's Spark 3.5. ``read_delta_stream`` / ``read_delta`` (``jobs.sources._delta_spark``)
pick the Delta reader and import the Python source only when it is the one that runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobs.sources._delta_offsets import DeltaOffset
from jobs.sources._delta_spark import (
    DELTA_READERS,
    DeltaReader,
    DeltaStreamOptions,
    choose_delta_reader,
    read_delta,
    read_delta_stream,
)
from jobs.sources._kinesis_preflight import check_kinesis_stream
from jobs.sources._offsets import ShardPosition, StartPosition, StreamOffset, parse_starting_position
from jobs.sources.errors import (
    ChangeCommitError,
    DataLossError,
    DeltaLogError,
    DeltaSourceError,
    DeltaTableNotFoundError,
    KinesisReadError,
    MissingDataFileError,
    SourceError,
    SourceSettingsError,
    StreamAccessError,
    StreamNotFoundError,
)
from jobs.sources.kafka import KafkaSettings, kafka_to_records, read_kafka_stream

if TYPE_CHECKING:
    from jobs.sources.delta import DeltaDataSource, DeltaSourceSettings
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
    **dict.fromkeys(("DeltaDataSource", "DeltaSourceSettings"), "jobs.sources.delta"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jobs.sources' has no attribute {name!r}")


__all__ = [
    "DELTA_READERS",
    "ChangeCommitError",
    "DataLossError",
    "DeltaDataSource",
    "DeltaLogError",
    "DeltaOffset",
    "DeltaReader",
    "DeltaSourceError",
    "DeltaSourceSettings",
    "DeltaStreamOptions",
    "DeltaTableNotFoundError",
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
    "choose_delta_reader",
    "kafka_to_records",
    "parse_starting_position",
    "read_delta",
    "read_delta_stream",
    "read_kafka_stream",
    "read_kinesis_stream",
    "read_source_metrics",
]
