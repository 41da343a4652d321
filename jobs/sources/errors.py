"""Errors raised by the stream sources. Every message names the stream or topic (and shard, partition or region)
it concerns."""

from __future__ import annotations

from jobs.errors import JobError, SettingsError


class SourceError(JobError):
    """Base of every error the stream sources raise on purpose."""


class SourceSettingsError(SourceError, SettingsError):
    """A source option is invalid (bad starting position, non-positive cap, ...)."""


class StreamNotFoundError(SourceError):
    """The stream does not exist in the region the job looked in."""


class StreamAccessError(SourceError):
    """The stream could not be reached: bad credentials, missing permission or wrong region/endpoint."""


class DataLossError(SourceError):
    """Records between the checkpointed position and the trim horizon expired before they were read."""


class KinesisReadError(SourceError):
    """A Kinesis call kept failing after every retry."""


class KafkaReadError(SourceError):
    """The Kafka broker returned an error that retrying does not cure."""
