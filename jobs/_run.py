"""Waiting on a job's streaming query and stopping it: what every streaming job's ``run()`` shares.

SIGINT/SIGTERM ask for a stop after the current micro-batch instead of killing the job, so a stopped run has
committed every batch it started; the job's own signal handlers are put back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

# A bounded run is a fast processing-time trigger stopped once a trigger finds nothing new (Spark 4.0 runs a
# Python source only once under Trigger.AvailableNow); see jobs.ingest.caught_up.
DRAIN_POLL = "500 milliseconds"


@contextlib.contextmanager
def stop_on_signals(
    logger: logging.Logger, name: str, *, after: str = "the current micro-batch"
) -> Iterator[threading.Event]:
    """SIGINT/SIGTERM set the event this yields (the caller stops after ``after``), instead of killing the job.

    The previous handlers are put back on leaving, also when the body raised. The notice goes to ``logger``
    (the job's own) as ``"<name>: SIGTERM received, stopping after <after>"``.
    """
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        logger.info("%s: %s received, stopping after %s", name, signal.Signals(signum).name, after)
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop_requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_and_raise(query: StreamingQuery) -> None:
    """Stop ``query`` if it still runs; raise its error when it failed."""
    if query.isActive:
        query.stop()
    error = query.exception()
    if error is not None:
        raise error


def wait_for_query(query: StreamingQuery, stop_requested: threading.Event, *, available_now: bool) -> bool:
    """Wait until ``query`` ends, a stop is requested, or (``available_now``) a trigger finds nothing new.

    Returns True when it returned because the query caught up with its source (available-now).
    """
    from jobs.ingest import caught_up

    while query.isActive and not stop_requested.is_set():
        # Seconds; PySpark takes a float although its annotation says int.
        query.awaitTermination(0.25 if available_now else 1)  # type: ignore[arg-type]
        if available_now and caught_up(query):
            return True
    return False
