"""The source under faults: every throttled call counted (idle polls included), botocore retrying nothing
behind its back, and its files next to an s3:// checkpoint surviving S3 SlowDown."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from jobs._aws import make_client
from jobs.sources._checkpoint import last_logged_offset, metrics_files, pinned_start, read_metrics
from jobs.sources.kinesis import KinesisSourceSettings, KinesisStreamReader, add_call_counts

FLAKY = Path(__file__).with_name("flaky_kinesis.py")


def _shard(records: int, throttled: int, retries: int, refreshes: int) -> dict:
    return {
        "records": records,
        "bytes": records * 10,
        "millis_behind_latest": 0,
        "throttled": throttled,
        "retries": retries,
        "iterator_refreshes": refreshes,
        "finished": False,
    }


def test_counts_of_idle_plans_are_added_and_the_batch_keeps_its_own_records():
    batch = {
        "records": 5,
        "throttled": 1,
        "retries": 1,
        "listing": {"calls": 2, "throttled": 0, "retries": 0},
        "shards": {"shardId-0": _shard(5, 1, 1, 0)},
    }
    idle = {
        "records": 0,
        "throttled": 3,
        "retries": 4,
        "idle_plans": 2,
        "listing": {"calls": 4, "throttled": 1, "retries": 1},
        "shards": {"shardId-0": _shard(0, 2, 3, 1), "shardId-1": _shard(0, 1, 1, 0)},
    }
    merged = add_call_counts(batch, idle)
    assert merged["records"] == 5
    assert (merged["throttled"], merged["retries"], merged["idle_plans"]) == (4, 5, 2)
    assert merged["listing"] == {"calls": 6, "throttled": 1, "retries": 1}
    assert merged["shards"]["shardId-0"] == _shard(5, 3, 4, 1)
    assert {k: merged["shards"]["shardId-1"][k] for k in ("records", "throttled", "retries")} == {
        "records": 0,
        "throttled": 1,
        "retries": 1,
    }


def test_a_throttle_on_the_executors_read_is_in_its_batchs_metrics(moto_endpoint, unique_name, tmp_path):
    """The planner and a task's read run in this process, as Spark runs them (planner, then executor)."""
    import dataclasses
    import pickle

    from jobs.sources.kinesis import read_source_metrics

    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    kinesis.create_stream(StreamName=unique_name, ShardCount=1)
    checkpoint = str(tmp_path / "checkpoint")
    settings = KinesisSourceSettings(
        stream_name=unique_name,
        region="us-east-1",
        checkpoint_location=checkpoint,
        start="trim-horizon",
        endpoint_url=moto_endpoint,
        client_factory=f"{FLAKY}:build_throttled_once",
        idle_poll_ms=3_600_000,
    )
    planner = KinesisStreamReader(settings)
    initial = planner.initialOffset()
    first = planner.latestOffset()
    assert first["batch"] == 0 and list(first["read"]) == ["shardId-000000000000"]
    executor = pickle.loads(pickle.dumps(planner))
    (task,) = planner.partitions(initial, first)
    assert list(executor.read(task)) == []  # the stream is empty; the one GetRecords was throttled first
    (batch,) = read_source_metrics(checkpoint, batch_id=0)
    assert {k: batch[k] for k in ("batch_id", "records", "throttled", "retries")} == {
        "batch_id": 0,
        "records": 0,
        "throttled": 1,
        "retries": 1,
    }
    kinesis.put_records(
        StreamName=unique_name, Records=[{"Data": f"{n}".encode(), "PartitionKey": "k"} for n in range(3)]
    )
    # Batch 0 read up to the tip: the next plan waits for the idle poll instead of planning an empty batch.
    assert planner.latestOffset() == first
    planner._settings = dataclasses.replace(settings, idle_poll_ms=0)
    second = planner.latestOffset()
    assert second["batch"] == 1
    (task,) = planner.partitions(first, second)
    rows = [row for part in executor.read(task) for row in part.to_pylist()]
    assert [row["data"] for row in rows] == [b"0", b"1", b"2"]
    (batch,) = read_source_metrics(checkpoint, batch_id=1)
    assert {k: batch[k] for k in ("batch_id", "records", "throttled", "retries")} == {
        "batch_id": 1,
        "records": 3,
        "throttled": 0,
        "retries": 0,
    }


def test_the_sources_kinesis_client_makes_one_attempt_per_call(faulty_endpoint, faults):
    kinesis = make_client("kinesis", region="us-east-1", endpoint_url=faulty_endpoint)
    assert kinesis.meta.config.retries == {"total_max_attempts": 1, "mode": "standard"}
    kinesis.create_stream(StreamName="one-attempt", ShardCount=1)
    shard_iterator = kinesis.get_shard_iterator(
        StreamName="one-attempt", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    faults("get-throttle=1")
    try:
        kinesis.get_records(ShardIterator=shard_iterator)
    except kinesis.exceptions.ProvisionedThroughputExceededException as error:
        assert error.response["ResponseMetadata"]["RetryAttempts"] == 0
    # One HTTP request: the source's own retry loop sees (and counts) every throttle.
    from lakestack.emulator import read_faults

    assert read_faults(faulty_endpoint)["kinds"]["get-throttle"]["injected"] == 1


def test_files_next_to_an_s3_checkpoint_survive_slow_down(faulty_endpoint, faults):
    boto3.client("s3", endpoint_url=faulty_endpoint, region_name="us-east-1").create_bucket(
        Bucket="lakestack-checkpoint-faults"
    )
    checkpoint = "s3://lakestack-checkpoint-faults/query"
    reader = KinesisStreamReader(
        KinesisSourceSettings(
            stream_name="s",
            region="us-east-1",
            checkpoint_location=checkpoint,
            start="trim-horizon",
            endpoint_url=faulty_endpoint,
        )
    )
    faults("s3-503=0.3", seed=4)
    offset = {"stream": "s", "shards": {"shardId-000000000000": {"sequence": "7"}}}
    files = metrics_files(checkpoint, reader._s3, retain=100)
    for batch_id in range(12):
        files.write(batch_id, {"batch_id": batch_id, "records": batch_id})
    s3 = reader._s3()
    s3.put_object(
        Bucket="lakestack-checkpoint-faults",
        Key="query/offsets/11",
        Body=("v1\n{}\n" + json.dumps(offset) + "\n").encode(),
    )
    assert [m["records"] for m in read_metrics(checkpoint, reader._s3)] == list(range(12))
    assert pinned_start(checkpoint, "trim-horizon", reader._s3) == "trim-horizon"
    assert pinned_start(checkpoint, "latest", reader._s3) == "trim-horizon"
    assert last_logged_offset(checkpoint, "s", reader._s3) == (11, offset)
    from lakestack.emulator import read_faults

    tally = read_faults(faulty_endpoint)["kinds"]["s3-503"]
    assert tally["injected"] > 0
    assert tally["survived"] == tally["injected"]
