"""Many fast micro-batches: what the kit keeps per batch stays bounded, and restarts after pruning resume
exactly once (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from deltalake import DeltaTable

from jobs import ingest
from jobs.errors import BatchNotKeptError
from jobs.sources import read_source_metrics

REGION = "us-east-1"
RETAIN = 3
# Four times the retention, then MORE after a restart: pruning at work nine times over, and past delta-spark's
# first log checkpoint (every 10 commits).
FIRST = 12
MORE = 3


def _put(kinesis, stream: str, numbers: range) -> list[bytes]:
    payloads = [json.dumps({"n": n}).encode() for n in numbers]
    for start in range(0, len(payloads), 500):
        chunk = payloads[start : start + 500]
        reply = kinesis.put_records(
            StreamName=stream, Records=[{"Data": p, "PartitionKey": "k"} for p in chunk]
        )
        assert reply["FailedRecordCount"] == 0
    return payloads


def _drain(spark, settings: ingest.IngestSettings) -> None:
    query = ingest.start(spark, settings)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def _landed(settings: ingest.IngestSettings) -> list[bytes]:
    return DeltaTable(settings.table).to_pyarrow_table(columns=["data"]).column("data").to_pylist()


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


@pytest.fixture
def retain_n_batches(spark):
    # Spark purges its offset and commit logs on a background thread by default, and skips a purge while the
    # previous one still runs, so which old batches are left when a query stops depends on timing; purged in
    # line here, what the setting keeps is exact.
    settings = {
        "spark.sql.streaming.minBatchesToRetain": str(RETAIN),
        "spark.sql.streaming.asyncLogPurge.enabled": "false",
    }
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    yield
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def test_many_batches_keep_the_last_n_and_restarts_after_pruning_resume_exactly_once(
    spark, moto_endpoint, unique_name, tmp_path, retain_n_batches
):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name=REGION)
    kinesis.create_stream(StreamName=unique_name, ShardCount=1)
    settings = ingest.IngestSettings(
        stream=unique_name,
        region=REGION,
        endpoint_url=moto_endpoint,
        table=str(tmp_path / "bronze"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="processing-time=0s",  # back to back
        max_records_per_shard=1,  # one record, one micro-batch
    )
    sent = _put(kinesis, unique_name, range(FIRST))
    ingest.preflight(settings)
    _drain(spark, settings)

    assert sorted(_landed(settings)) == sorted(sent)
    metrics = Path(settings.checkpoint) / "sources" / "kinesis" / "metrics"
    # 12 batches of one record, then batch 12: the poll that found the stream drained (executors read, so
    # only a batch can tell), which read nothing and committed nothing. The last 3 are kept.
    assert _names(metrics) == [f"batch-{batch:010d}.json" for batch in range(10, 13)]
    kept = read_source_metrics(settings.checkpoint)
    assert [(m["batch_id"], m["records"]) for m in kept] == [(10, 1), (11, 1), (12, 0)]
    with pytest.raises(BatchNotKeptError, match=r"batch 2's file .* is no longer kept: .* \(10\.\.12 now\)"):
        read_source_metrics(settings.checkpoint, batch_id=2)
    # delta-spark checkpoints the table's log every 10 commits (version 0 is the table's creation).
    assert (Path(settings.table) / "_delta_log" / "00000000000000000010.checkpoint.parquet").is_file()
    # Spark's own logs are bounded by the same setting (it keeps one more: the batch it may replay).
    assert sorted(_names(Path(settings.checkpoint) / "offsets"), key=int) == ["9", "10", "11", "12"]
    assert sorted(_names(Path(settings.checkpoint) / "commits"), key=int) == ["9", "10", "11", "12"]

    # A restart after pruning resumes where the offset log says, and adds only the new records.
    more = _put(kinesis, unique_name, range(FIRST, FIRST + MORE))
    _drain(spark, settings)
    assert sorted(_landed(settings)) == sorted(sent + more)
    # Batches 13..15 read one record each, 16 found the stream drained.
    assert _names(metrics) == [f"batch-{batch:010d}.json" for batch in range(14, 17)]

    # A crash between the Delta commit of batch 15 (the last with rows) and Spark's commit: the checkpoint
    # is put back to "15 planned, not committed"; the replayed batch is skipped, not written twice.
    version = DeltaTable(settings.table).version()
    for name in (
        "commits/16",
        "commits/.16.crc",
        "offsets/16",
        "offsets/.16.crc",
        "commits/15",
        "commits/.15.crc",
    ):
        (Path(settings.checkpoint) / name).unlink(missing_ok=True)
    _drain(spark, settings)
    assert DeltaTable(settings.table).version() == version
    assert sorted(_landed(settings)) == sorted(sent + more)
    kept_now = _names(metrics)
    assert len(kept_now) == RETAIN and kept_now[-1] >= "batch-0000000016.json"
