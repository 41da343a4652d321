"""The Kinesis producer against the emulator's faults: every event acknowledged once, and its own counts agree
with what the emulator injected."""

from __future__ import annotations

import subprocess

import boto3
import pytest
from botocore.exceptions import ClientError

from lakestack.emulator import stop_faults
from loadtest.errors import LoadTestError
from loadtest.ledger import read_ledger, read_producer_stats
from loadtest.options import LoadSettings
from loadtest.runner import LocustRun
from loadtest.users import check_stream


def read_stream(client, stream: str) -> list[bytes]:
    """Every record of every shard (bounded: 50 GetRecords per shard)."""
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


@pytest.mark.slow
def test_locust_run_through_throttling_and_5xx_delivers_every_event_once(faulty_endpoint, faults, tmp_path):
    client = boto3.client("kinesis", endpoint_url=faulty_endpoint, region_name="us-east-1")
    client.create_stream(StreamName="producer-faults", ShardCount=2)
    faults("put-throttle=0.3,kinesis-5xx=0.1", seed=21)
    argv = LocustRun(
        stream="producer-faults",
        region="us-east-1",
        endpoint_url=faulty_endpoint,
        ledger_dir=str(tmp_path / "ledger"),
        # One user: the calls come in one order, so the seeded draws fall the same way on every run (two users
        # interleave their calls, and a run once drew no 5xx at all).
        users=1,
        spawn_rate=1,
        run_time="120s",
        max_events=1500,
        batch_size=100,
        # The generator's own faults off: every event here is unique, so a duplicate can only be the stream's.
        extra=["--only-summary", "--loglevel", "WARNING", "--duplicate-rate", "0", "--malformed-rate", "0"],
    ).argv()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=200)
    tally = stop_faults(faulty_endpoint)

    assert done.returncode == 0, done.stderr[-3000:]
    ledger = read_ledger(tmp_path / "ledger")
    assert len({entry.event_id for entry in ledger}) == len(ledger) == 1500
    stored = read_stream(client, "producer-faults")
    assert len(stored) == len(set(stored)) == 1500
    throttles, errors = tally["kinds"]["put-throttle"], tally["kinds"]["kinesis-5xx"]
    assert throttles["injected"] > 0 and errors["injected"] > 0
    assert (throttles["survived"], errors["survived"]) == (throttles["injected"], errors["injected"])
    stats = read_producer_stats(tmp_path / "ledger")
    assert stats is not None
    # The producer saw every entry the emulator throttled, and gave up on none.
    assert (stats.acknowledged, stats.failed, stats.throttled) == (1500, 0, throttles["injected"])
    assert stats.retried >= stats.throttled


class BusyThenReady:
    """DescribeStreamSummary answers InternalFailure ``busy`` times, then succeeds."""

    class exceptions:  # botocore's client.exceptions
        class ResourceNotFoundException(Exception):
            pass

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.calls = 0

    def describe_stream_summary(self, *, StreamName: str) -> dict:
        self.calls += 1
        if self.calls <= self.busy:
            raise ClientError(
                {"Error": {"Code": "InternalFailure", "Message": "oops"}}, "DescribeStreamSummary"
            )
        return {"StreamDescriptionSummary": {"StreamName": StreamName}}


def test_stream_check_asks_a_busy_service_again():
    client, sleeps = BusyThenReady(busy=2), []
    check_stream(LoadSettings(stream="s"), client=client, sleep=sleeps.append)
    assert client.calls == 3
    assert len(sleeps) == 2


def test_stream_check_gives_up_on_a_service_that_stays_busy():
    client = BusyThenReady(busy=100)
    with pytest.raises(
        LoadTestError, match=r"stream 's': expected to reach Kinesis at us-east-1, found an error"
    ):
        check_stream(LoadSettings(stream="s"), client=client, sleep=lambda _: None)
    assert client.calls == 10
