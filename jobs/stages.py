"""Where a micro-batch's time goes: one record of stage timings per batch of a streaming query.

Stages, in the order a record meets them (seconds, per micro-batch):

- ``wait_in_stream``: how long the batch's records sat in the stream before the plan that picked them up
  began (plan start minus the records' mean ``ApproximateArrivalTimestamp``; the Kinesis source only).
- ``planning_and_reading``: the source's ``latestOffset()``: listing shards and reading every eligible shard
  up to its cap (Spark's ``latestOffset`` duration where the source reports none of its own).
- ``transfer_into_spark``: the rows' trip out to the driver as one Arrow table (``to_arrow`` inside
  ``foreachBatch``), for a writer that still takes them there (delta-rs); 0 for delta-spark, whose executors
  write the batch where it is (the ingest job).
- ``spark_processing``: Spark's own work on the batch outside that trip and the commit: getBatch, query
  planning, scheduling, and the rest of ``foreachBatch``.
- ``delta_commit``: the Delta append that makes the rows visible: with delta-spark the executors reading the
  batch and writing its Parquet files, then the commit; with delta-rs the transaction lookup and the append.
- ``checkpoint``: Spark's offset log write before the batch and its commit log write after it.

The first five sum to a record's way from arriving in the stream to being visible (plus the wait for a
trigger, which is in ``wait_in_stream``); the checkpoint comes after visibility but delays the next batch.

The pieces come from three places: the source's per-batch metrics file (planning, arrivals), the
``foreachBatch`` writer (transfer, commit), and Spark's query progress (``durationMs``). A
:class:`StageRecorder` joins them per batch id; :func:`stage_record` is the pure join, tested alone.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STAGES: tuple[str, ...] = (
    "wait_in_stream",
    "planning_and_reading",
    "transfer_into_spark",
    "spark_processing",
    "delta_commit",
    "checkpoint",
)
# A long run keeps the newest batches only: a record is ~300 bytes, so this is a few MB at most.
MAX_RECORDS = 20_000
# How long closing the listener waits for the events Spark posted before it to be delivered.
LISTENER_DRAIN_S = 10.0


def _seconds(millis: Any) -> float:
    return float(millis or 0) / 1000.0


def stage_record(
    batch_id: int,
    *,
    progress: Mapping[str, Any],
    writer: Mapping[str, Any] | None,
    source: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One batch's stage timings from Spark's progress, the writer's timings and the source's metrics.

    Args:
        batch_id: the micro-batch.
        progress: Spark's progress of the batch (``durationMs``, ``timestamp``, ``numInputRows``).
        writer: what the ``foreachBatch`` writer measured (``transfer_s``, ``commit_s``, ``total_s``,
            ``committed_at``, ``rows``); None when the batch wrote nothing (e.g. skipped as a replay).
        source: the Kinesis source's metrics of the batch (``plan_started_at``, ``planning_seconds``,
            ``mean_arrival_at``, ``records``); None for a source that keeps none (Kafka).

    Returns:
        ``batch_id``, ``rows``, ``trigger_at`` (ISO-8601, as Spark reports it), ``committed_at`` (epoch
        seconds, None without a commit) and one entry per name in :data:`STAGES` (seconds, or None when
        that stage was not measured).
    """
    durations = progress.get("durationMs") or {}
    writer = writer or {}
    source = source or {}
    transfer = writer.get("transfer_s")
    commit = writer.get("commit_s")
    inside = float(writer.get("total_s") or 0.0)
    spark_own = _seconds(durations.get("getBatch")) + _seconds(durations.get("queryPlanning"))
    spark_own += max(0.0, _seconds(durations.get("addBatch")) - inside)
    if transfer is not None and commit is not None:
        # What the writer did apart from the transfer and the commit (reading back a table version, logging).
        spark_own += max(0.0, inside - float(transfer) - float(commit))
    planning = source.get("planning_seconds")
    if planning is None:
        planning = _seconds(durations.get("latestOffset"))
    wait = None
    if source.get("records") and source.get("mean_arrival_at") is not None:
        wait = max(0.0, float(source["plan_started_at"]) - float(source["mean_arrival_at"]))
    record: dict[str, Any] = {
        "batch_id": batch_id,
        "rows": int(progress.get("numInputRows") or writer.get("rows") or 0),
        "trigger_at": progress.get("timestamp"),
        "committed_at": writer.get("committed_at"),
        "wait_in_stream": wait,
        "planning_and_reading": round(float(planning), 4),
        "transfer_into_spark": None if transfer is None else round(float(transfer), 4),
        "spark_processing": round(spark_own, 4),
        "delta_commit": None if commit is None else round(float(commit), 4),
        "checkpoint": round(
            _seconds(durations.get("walCommit")) + _seconds(durations.get("commitOffsets")), 4
        ),
    }
    if wait is not None:
        record["wait_in_stream"] = round(wait, 4)
    return record


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Per stage over the batches that carried rows: ``p50_s``, ``p95_s``, ``mean_s`` and ``batches``.

    Idle triggers (no rows) are left out: they would pull every percentile towards an empty poll.
    """
    busy = [r for r in records if r.get("rows")]
    summary: dict[str, dict[str, float | int]] = {}
    for stage in STAGES:
        values = [float(r[stage]) for r in busy if r.get(stage) is not None]
        if not values:
            continue
        summary[stage] = {
            "p50_s": round(_percentile(values, 50), 3),
            "p95_s": round(_percentile(values, 95), 3),
            "mean_s": round(sum(values) / len(values), 3),
            "batches": len(values),
        }
    return summary


class StageRecorder:
    """Collects one stage record per micro-batch of one query (thread-safe: Spark calls in from two threads).

    The writer calls :meth:`batch_written` from ``foreachBatch``; Spark's progress arrives through the
    listener from :meth:`listen`, which joins the two with the source's metrics (``source_metrics``) and
    keeps the result. Records are logged one line per batch, and kept for the run report
    (:meth:`records`, :meth:`summary`).

    Args:
        source_metrics: batch id -> the source's metrics of that batch, or None (read after the batch, off
            its critical path).
    """

    def __init__(self, source_metrics: Callable[[int], Mapping[str, Any] | None] | None = None) -> None:
        self._source_metrics = source_metrics
        self._lock = threading.Lock()
        self._written: dict[int, dict[str, Any]] = {}
        self._records: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._query_name: str | None = None
        self._listener: Any = None
        self._spark: SparkSession | None = None

    def batch_written(
        self, batch_id: int, timings: Mapping[str, Any], *, source: Mapping[str, Any] | None = None
    ) -> None:
        """What ``foreachBatch`` measured for ``batch_id`` (see :func:`stage_record`), with the source's
        metrics of the batch when the writer already read them."""
        with self._lock:
            self._written[batch_id] = {**timings, "source": source}

    def progress(self, progress: Mapping[str, Any]) -> dict[str, Any] | None:
        """Join one progress event (a dict as ``query.lastProgress``) into a record; None for idle triggers."""
        batch_id = int(progress["batchId"])
        with self._lock:
            writer = self._written.pop(batch_id, None)
        if writer is None and not progress.get("numInputRows"):
            return None  # an idle trigger: nothing was planned, nothing written
        source = None if writer is None else writer.pop("source", None)
        if source is None and self._source_metrics is not None:
            try:
                source = self._source_metrics(batch_id)
            except (OSError, ValueError, LookupError) as error:
                log.warning("stages: batch %d: source metrics unreadable (%s)", batch_id, error)
        record = stage_record(batch_id, progress=progress, writer=writer, source=source)
        with self._lock:
            self._records[batch_id] = record
            while len(self._records) > MAX_RECORDS:
                self._records.popitem(last=False)
        log.info(
            "stages: batch %d rows=%d %s",
            batch_id,
            record["rows"],
            " ".join(f"{s}={record[s]:.3f}s" for s in STAGES if record[s] is not None),
        )
        return record

    def records(self) -> list[dict[str, Any]]:
        """Every record kept so far, oldest batch first."""
        with self._lock:
            return [dict(r) for r in self._records.values()]

    def summary(self) -> dict[str, dict[str, float | int]]:
        return summarize(self.records())

    def listen(self, spark: SparkSession, query_name: str) -> None:
        """Receive the progress of the query named ``query_name`` through a StreamingQueryListener, until
        :meth:`close`. Called before the query starts (its id is not known yet), so no batch is missed."""
        from pyspark.sql.streaming import StreamingQueryListener

        recorder = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                return None

            def onQueryProgress(self, event: Any) -> None:
                progress = event.progress
                if progress.name != recorder._query_name:
                    return
                try:
                    recorder.progress(
                        {
                            "batchId": progress.batchId,
                            "numInputRows": progress.numInputRows,
                            "timestamp": progress.timestamp,
                            "durationMs": dict(progress.durationMs),
                        }
                    )
                except Exception:  # a listener must never fail the query: say so and go on
                    log.exception("stages: could not record batch %s", progress.batchId)

            def onQueryIdle(self, event: Any) -> None:
                return None

            def onQueryTerminated(self, event: Any) -> None:
                return None

        self._query_name = query_name
        self._spark = spark
        self._listener = _Listener()
        spark.streams.addListener(self._listener)

    def close(self, *, drain_timeout_s: float = LISTENER_DRAIN_S) -> None:
        """Stop listening (idempotent). Records stay readable.

        Call it after the query stopped and before the session does: Spark delivers listener events on its
        own thread, after ``stop()`` returned (the query's last progress, its termination), and one still on
        its way when the Python side has gone fails with ``Listener PythonStreamingQueryListenerWrapper threw
        an exception`` and a py4j trace. So the events already posted are delivered first (at most
        ``drain_timeout_s``), then the listener is removed.
        """
        if self._listener is not None and self._spark is not None:
            wait_for_listener_events(self._spark, drain_timeout_s)
            self._spark.streams.removeListener(self._listener)
        self._listener = None


def wait_for_listener_events(spark: SparkSession, timeout_s: float) -> bool:
    """Wait until Spark's listener bus has delivered every event posted so far (at most ``timeout_s``).

    Returns False when it did not empty in time, or the bus cannot be reached (a stopped session).
    """
    try:
        bus = spark.sparkContext._jsc.sc().listenerBus()
        bus.waitUntilEmpty(int(timeout_s * 1000))
    except Exception as error:  # py4j's (a TimeoutException, a stopped JVM): the listener is removed anyway
        log.debug("stages: listener events not all delivered within %.0fs: %s", timeout_s, error)
        return False
    return True


__all__ = ["MAX_RECORDS", "STAGES", "StageRecorder", "stage_record", "summarize", "wait_for_listener_events"]
