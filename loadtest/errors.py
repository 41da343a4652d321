"""Errors raised by the load suite. Every message says what was expected, what was found, and what to do."""

from __future__ import annotations


class LoadTestError(Exception):
    """Base of every error the load suite raises on purpose."""


class OptionError(LoadTestError, ValueError):
    """A load-test option (command-line flag or environment variable) is invalid."""


class RecordTooLargeError(LoadTestError, ValueError):
    """One event is larger than a Kinesis record may be; it is refused before sending."""


class StreamNotFoundError(LoadTestError):
    """The target stream does not exist at the endpoint the load test was pointed at."""
