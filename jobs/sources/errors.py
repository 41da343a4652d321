"""Errors raised by the stream sources. Every message names the stream, topic or table (and shard, partition,
version or file) it concerns."""

from __future__ import annotations

from jobs.errors import USER_MISTAKE, AccessError, JobError, NotFoundError, SettingsError


class SourceError(JobError):
    """Base of every error the stream sources raise on purpose."""


class SourceSettingsError(SourceError, SettingsError):
    """A source option is invalid (bad starting position, non-positive cap, ...)."""


class StreamNotFoundError(SourceError, NotFoundError):
    """The stream does not exist in the region the job looked in (exit 2)."""


class StreamAccessError(SourceError, AccessError):
    """The stream could not be reached: bad credentials, missing permission or wrong region/endpoint (exit 2)."""


class DataLossError(SourceError):
    """Records between the checkpointed position and the trim horizon expired before they were read (exit 1)."""


class RangeMismatchError(SourceError, SettingsError):
    """A batch's recorded Kinesis range starts elsewhere than the batch's logged offset: the checkpoint's offsets
    were changed after the batch first ran (exit 2: the fix is to restore them or start a new checkpoint)."""


class KinesisReadError(SourceError):
    """A Kinesis call kept failing after every retry (exit 1)."""


class DeltaSourceError(SourceError):
    """Base of the Delta source's errors; every message names the table (and version or file)."""


class DeltaTableNotFoundError(DeltaSourceError, NotFoundError):
    """There is no Delta table at the URI the source was given (exit 2)."""


class ChangeCommitError(DeltaSourceError):
    """A commit removes or rewrites data and the stream reads appends only (exit 2: the fix is an option)."""

    exit_code = USER_MISTAKE


class MissingDataFileError(DeltaSourceError):
    """The log names a data file that storage no longer has (vacuumed, or deleted by hand)."""


class DeltaLogError(DeltaSourceError):
    """The log cannot serve the query: commits cleaned up, table replaced, unsupported features, new schema."""
