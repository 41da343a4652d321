"""Per-micro-batch stage timings: the join of Spark's progress, the writer's timings and the source's metrics."""

from __future__ import annotations

import time
from types import SimpleNamespace

import boto3
import pytest

from jobs import ingest
from jobs.sources import read_source_metrics
from jobs.stages import STAGES, StageRecorder, stage_record, summarize

PROGRESS = {
    "batchId": 7,
    "numInputRows": 1200,
    "timestamp": "2026-11-21T12:00:01.000Z",
    "durationMs": {
        "latestOffset": 310,
        "walCommit": 40,
        "getBatch": 5,
        "queryPlanning": 25,
        "addBatch": 900,
        "commitOffsets": 35,
        "triggerExecution": 1320,
    },
}
WRITER = {"transfer_s": 0.5, "commit_s": 0.25, "total_s": 0.8, "committed_at": 1_795_000_002.5, "rows": 1200}
SOURCE = {
    "records": 1200,
    "planning_seconds": 0.3,
    "plan_started_at": 1_795_000_001.0,
    "mean_arrival_at": 1_795_000_000.4,
}


def test_a_batch_record_splits_the_batch_into_the_six_stages():
    record = stage_record(7, progress=PROGRESS, writer=WRITER, source=SOURCE)

    assert record == {
        "batch_id": 7,
        "rows": 1200,
        "trigger_at": "2026-11-21T12:00:01.000Z",
        "committed_at": 1_795_000_002.5,
        "wait_in_stream": 0.6,
        # The source's own clock, not Spark's latestOffset (which adds the Python worker round trip).
        "planning_and_reading": 0.3,
        "transfer_into_spark": 0.5,
        # getBatch + queryPlanning + addBatch outside the writer + the writer's own remainder.
        "spark_processing": 0.005 + 0.025 + 0.1 + 0.05,
        "delta_commit": 0.25,
        "checkpoint": 0.075,
    }


def test_without_source_metrics_planning_is_sparks_latest_offset_and_the_wait_is_unknown():
    record = stage_record(7, progress=PROGRESS, writer=WRITER, source=None)

    assert record["planning_and_reading"] == 0.31
    assert record["wait_in_stream"] is None


def test_records_that_arrived_after_planning_began_waited_zero():
    late = {**SOURCE, "mean_arrival_at": 1_795_000_001.2}

    assert stage_record(7, progress=PROGRESS, writer=WRITER, source=late)["wait_in_stream"] == 0.0


def test_summary_is_over_batches_with_rows_only():
    busy = [
        {"rows": 10, **dict.fromkeys(STAGES, None), "delta_commit": value, "checkpoint": 0.1}
        for value in (0.1, 0.2, 0.3, 0.4, 1.0)
    ]
    idle = {"rows": 0, **dict.fromkeys(STAGES, None), "delta_commit": 9.0, "checkpoint": 9.0}

    summary = summarize([*busy, idle])

    assert summary == {
        "delta_commit": {"p50_s": 0.3, "p95_s": 0.88, "mean_s": 0.4, "batches": 5},
        "checkpoint": {"p50_s": 0.1, "p95_s": 0.1, "mean_s": 0.1, "batches": 5},
    }


def test_the_recorder_joins_what_the_writer_saw_with_the_progress_and_skips_idle_triggers():
    recorder = StageRecorder(source_metrics=lambda batch: SOURCE if batch == 7 else None)
    recorder.batch_written(7, WRITER)

    assert recorder.progress({"batchId": 8, "numInputRows": 0, "durationMs": {"latestOffset": 20}}) is None
    recorder.progress(PROGRESS)

    assert [r["batch_id"] for r in recorder.records()] == [7]
    assert recorder.records()[0]["wait_in_stream"] == 0.6
    assert recorder.summary()["transfer_into_spark"] == {
        "p50_s": 0.5,
        "p95_s": 0.5,
        "mean_s": 0.5,
        "batches": 1,
    }


@pytest.mark.slow
def test_the_ingest_job_records_every_stage_of_every_batch(spark, moto_endpoint, unique_name, tmp_path):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    kinesis.create_stream(StreamName=unique_name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    entries = [{"Data": b'{"n": %d}' % n, "PartitionKey": f"k{n}"} for n in range(40)]
    assert kinesis.put_records(StreamName=unique_name, Records=entries)["FailedRecordCount"] == 0
    settings = ingest.IngestSettings(
        stream=unique_name,
        region="us-east-1",
        endpoint_url=moto_endpoint,
        table=str(tmp_path / "bronze"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="processing-time=0s",
        max_records_per_shard=5,
    )
    recorder = StageRecorder()
    query = ingest.start(spark, settings, stages=recorder)
    try:
        query.processAllAvailable()
        # Progress reaches listeners through Spark's listener bus, after the batch: wait for that, bounded.
        deadline = time.monotonic() + 60
        while sum(r["rows"] for r in recorder.records()) < 40 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
        recorder.close()

    records = recorder.records()
    assert sum(r["rows"] for r in records) == 40
    # 4 shards, 5 records each per batch at most: at least two batches carried rows.
    busy = [r for r in records if r["rows"]]
    assert len(busy) >= 2
    for record in busy:
        assert all(record[stage] is not None and record[stage] >= 0 for stage in STAGES), record
        assert record["delta_commit"] > 0 and record["checkpoint"] > 0
        # delta-spark writes the batch from the executors: no trip to the driver to time.
        assert record["transfer_into_spark"] == 0.0
        # The wait is the one the source measured for this very batch (its metrics carry Spark's batch id).
        (metrics,) = read_source_metrics(settings.checkpoint, batch_id=record["batch_id"])
        assert metrics["records"] == record["rows"]
        expected = round(max(0.0, metrics["plan_started_at"] - metrics["mean_arrival_at"]), 4)
        assert record["wait_in_stream"] == expected
    # A planned batch that found no records (the planner never reads them) wrote nothing and waited nothing.
    for record in records:
        if not record["rows"]:
            assert (record["wait_in_stream"], record["delta_commit"]) == (None, None), record
    assert set(recorder.summary()) == set(STAGES)


class _Calls:
    """A session stand-in that records the listener calls, in order, and Spark's listener bus draining."""

    def __init__(self, *, bus_error: Exception | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.bus_error = bus_error
        self.streams = SimpleNamespace(
            addListener=lambda listener: self.calls.append(("add", type(listener).__name__)),
            removeListener=lambda listener: self.calls.append(("remove", type(listener).__name__)),
        )
        bus = SimpleNamespace(waitUntilEmpty=self._wait)
        self.sparkContext = SimpleNamespace(
            _jsc=SimpleNamespace(sc=lambda: SimpleNamespace(listenerBus=lambda: bus))
        )

    def _wait(self, timeout_ms: int) -> None:
        self.calls.append(("wait for the listener bus", timeout_ms))
        if self.bus_error is not None:
            raise self.bus_error


def test_closing_delivers_the_events_already_posted_before_removing_the_listener():
    # Removed while Spark still delivers the query's last events, the listener fails on Spark's thread once the
    # Python side is gone (`Listener PythonStreamingQueryListenerWrapper threw an exception`).
    session = _Calls()
    recorder = StageRecorder()
    recorder.listen(session, "ingest")  # type: ignore[arg-type]
    recorder.close()
    recorder.close()

    assert session.calls == [
        ("add", "_Listener"),
        ("wait for the listener bus", 10_000),
        ("remove", "_Listener"),
    ]


def test_a_listener_bus_that_does_not_empty_still_lets_the_listener_go():
    session = _Calls(bus_error=TimeoutException("The event queue is not empty after 2000 ms."))
    recorder = StageRecorder()
    recorder.listen(session, "ingest")  # type: ignore[arg-type]
    recorder.close(drain_timeout_s=2)

    assert session.calls == [
        ("add", "_Listener"),
        ("wait for the listener bus", 2000),
        ("remove", "_Listener"),
    ]


class TimeoutException(Exception):
    """What py4j raises for the JVM's java.util.concurrent.TimeoutException (its own error type, here)."""
