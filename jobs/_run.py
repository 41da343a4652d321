"""Waiting on a job's streaming query and stopping it: what every streaming job's ``run()`` shares.

SIGINT/SIGTERM ask for a stop after the current micro-batch instead of killing the job, so a stopped run has
committed every batch it started; the job's own signal handlers are put back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

# A bounded run is a fast processing-time trigger stopped once a trigger finds nothing new (Spark 4.0 and 4.1 run a
# Python source only once under Trigger.AvailableNow); see caught_up below.
DRAIN_POLL = "500 milliseconds"
# The longest a stop waits for the micro-batch in flight to end before it interrupts it.
STOP_WAIT_S = 30.0


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


def stop_between_batches(
    query: StreamingQuery, *, timeout_s: float = STOP_WAIT_S, poll_s: float = 0.02
) -> None:
    """Stop ``query`` between micro-batches: at once when no trigger runs, else as soon as the batch running
    now has ended (the next is still planning then), waiting at most ``timeout_s`` for it.

    ``query.stop()`` interrupts a batch in flight. Inside a Python ``foreachBatch`` the interruption comes
    back to the JVM as a py4j error whose text (a Python traceback around a Java one) Spark matches with a
    regular expression that recurses once per character (``StreamExecution.isInterruptionException``): a long
    one overflows the stream thread's stack, ``Exception in thread "stream execution thread for ..."
    java.lang.StackOverflowError`` and a thousand lines of ``java.util.regex.Pattern`` frames.
    """
    deadline = time.monotonic() + timeout_s
    running = _last_batch(query)
    while query.isActive and time.monotonic() < deadline:
        if not query.status["isTriggerActive"] or _last_batch(query) != running:
            break
        time.sleep(poll_s)
    if query.isActive:
        query.stop()


def _last_batch(query: StreamingQuery) -> int | None:
    last = query.lastProgress
    return None if last is None else int(last["batchId"])


def stop_and_raise(query: StreamingQuery) -> None:
    """Stop ``query`` (between micro-batches) if it still runs; raise its error when it failed."""
    stop_between_batches(query)
    error = query.exception()
    if error is not None:
        raise error


def caught_up(query: StreamingQuery, *, since: datetime | None = None) -> bool:
    """True once a trigger (started at or after `since`) found nothing new in the source.

    Triggers run one after another, so when one finds no new data every batch planned before it has been
    committed: everything the stream held when that trigger started is in the table. `jobs.ingest.start()` makes Spark
    report such idle triggers at once (noDataProgressEventInterval = 0) instead of every 10 s.
    """
    last = query.lastProgress
    if not last or query.status["isTriggerActive"]:
        return False
    idle = last["numInputRows"] == 0 and all(s["startOffset"] == s["endOffset"] for s in last["sources"])
    if not idle:
        return False
    if since is None:
        return True
    started = datetime.fromisoformat(last["timestamp"])
    return started >= since


def wait_for_query(query: StreamingQuery, stop_requested: threading.Event, *, available_now: bool) -> bool:
    """Wait until ``query`` ends, a stop is requested, or (``available_now``) a trigger finds nothing new.

    Returns True when it returned because the query caught up with its source (available-now).
    """
    while query.isActive and not stop_requested.is_set():
        # Seconds; PySpark takes a float although its annotation says int.
        query.awaitTermination(0.25 if available_now else 1)  # type: ignore[arg-type]
        if available_now and caught_up(query):
            return True
    return False
