"""Integration: Locust as subprocesses against the embedded emulator (moto server)."""

from __future__ import annotations

import json
import subprocess

import boto3
import pytest

from lakestack.emulator import free_port
from loadtest.ledger import read_ledger
from loadtest.runner import LocustRun, distributed_extra, worker_command

pytestmark = pytest.mark.slow


def kinesis(endpoint: str):
    return boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")


def read_stream(client, stream: str) -> list[bytes]:
    """Every record in every shard, from the start (bounded: 50 GetRecords per shard)."""
    records: list[bytes] = []
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _ in range(50):
            reply = client.get_records(ShardIterator=iterator, Limit=10_000)
            records += [r["Data"] for r in reply["Records"]]
            if not reply["Records"]:
                break
            iterator = reply["NextShardIterator"]
    return records


def test_distributed_run_with_two_workers_delivers_every_ledger_id(moto_endpoint, unique_name, tmp_path):
    client = kinesis(moto_endpoint)
    client.create_stream(StreamName=unique_name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    client.get_waiter("stream_exists").wait(StreamName=unique_name)
    port = free_port()
    master = LocustRun(
        stream=unique_name,
        region="us-east-1",
        endpoint_url=moto_endpoint,
        ledger_dir=str(tmp_path / "ledger"),
        users=4,
        spawn_rate=4,
        run_time="60s",
        max_events=1234,
        batch_size=50,
        # Faults off: this test is about delivery; every payload here is a valid event with a unique id.
        extra=[
            *distributed_extra(workers=2, master_port=port),
            "--only-summary",
            "--duplicate-rate",
            "0",
            "--malformed-rate",
            "0",
        ],
    ).argv()
    procs = [subprocess.Popen(master, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    procs += [
        subprocess.Popen(
            worker_command(master_port=port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    tails = "\n----\n".join(out[-2000:] for out in outputs)
    assert [p.returncode for p in procs] == [0, 0, 0], tails
    assert "lakestack: 1234 events acknowledged, 0 failed of 1234" in outputs[0], tails
    entries = read_ledger(tmp_path / "ledger")
    assert len(list((tmp_path / "ledger").glob("ledger-*.jsonl"))) == 2, tails  # one file per worker
    ids = [e.event_id for e in entries]
    assert len(ids) == 1234
    assert len(set(ids)) == 1234
    in_stream = read_stream(client, unique_name)
    assert len(in_stream) == 1234
    assert {json.loads(data)["event_id"] for data in in_stream} == set(ids)


def test_missing_stream_exits_2_with_a_clear_message(moto_endpoint, tmp_path):
    argv = LocustRun(
        stream="no-such-stream",
        region="us-east-1",
        endpoint_url=moto_endpoint,
        ledger_dir=str(tmp_path),
        max_events=10,
        run_time="20s",
    ).argv()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)

    assert done.returncode == 2
    assert "error: stream 'no-such-stream': expected it to exist at " + moto_endpoint in done.stderr
    assert "Traceback" not in done.stderr
