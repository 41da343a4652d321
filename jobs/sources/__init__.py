"""Stream sources for the Spark jobs: Kinesis Data Streams via Spark's Python Data Source API."""

from __future__ import annotations

from jobs.sources._offsets import ShardPosition, StartPosition, StreamOffset, parse_starting_position
from jobs.sources.errors import (
    DataLossError,
    KinesisReadError,
    SourceError,
    SourceSettingsError,
    StreamAccessError,
    StreamNotFoundError,
)
from jobs.sources.kinesis import (
    KinesisDataSource,
    KinesisSourceSettings,
    read_kinesis_stream,
    read_source_metrics,
)

__all__ = [
    "DataLossError",
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
    "parse_starting_position",
    "read_kinesis_stream",
    "read_source_metrics",
]
