"""Unit tests of the Spark-free shard reader with a fake Kinesis client: retries, expiry, lineage ends, loss."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from botocore.exceptions import ClientError

from jobs._retry import RetryPolicy
from jobs.errors import BatchNotKeptError
from jobs.sources import (
    DataLossError,
    KinesisReadError,
    ShardPosition,
    StreamAccessError,
    StreamNotFoundError,
    parse_starting_position,
)
from jobs.sources._checkpoint import last_logged_offset, metrics_files, pinned_start, read_metrics
from jobs.sources._client import explain_access_error
from jobs.sources._shards import ShardReader

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _error(code: str, status: int, operation: str = "GetRecords") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


class FakeKinesis:
    """Shard records with 56-digit-like sequence numbers; scripted faults on GetRecords."""

    def __init__(
        self, records: int, *, base: int = 10**50, closed: bool = False, trimmed_below: int = 0
    ) -> None:
        self.seqs = [base + 7 * i for i in range(records)]  # not contiguous, like AWS
        self.closed = closed
        self.trimmed_below = trimmed_below
        self.faults: list[ClientError] = []
        self.iterator_calls: list[dict] = []
        self.get_records_calls = 0

    def _available(self) -> list[int]:
        return [s for s in self.seqs if s >= self.trimmed_below]

    def get_shard_iterator(self, **kwargs):
        self.iterator_calls.append(kwargs)
        kind = kwargs["ShardIteratorType"]
        after = int(kwargs["StartingSequenceNumber"]) if kind == "AFTER_SEQUENCE_NUMBER" else -1
        return {"ShardIterator": f"it:{after}"}

    def get_records(self, ShardIterator, Limit):
        self.get_records_calls += 1
        if self.faults:
            raise self.faults.pop(0)
        after = int(ShardIterator.split(":")[1])
        batch = [s for s in self._available() if s > after][:Limit]
        last = batch[-1] if batch else after
        at_end = self.closed and (not self._available() or last >= self._available()[-1])
        return {
            "Records": [
                {
                    "SequenceNumber": str(s),
                    "Data": f"r{s}".encode(),
                    "PartitionKey": "k",
                    "ApproximateArrivalTimestamp": T0 + dt.timedelta(seconds=(s - self.seqs[0]) // 7),
                }
                for s in batch
            ],
            "NextShardIterator": None if at_end and not batch else f"it:{last}",
            "MillisBehindLatest": 0 if not batch else 1000,
        }


def _reader(client, **kwargs) -> tuple[ShardReader, list[float]]:
    slept: list[float] = []
    reader = ShardReader(
        client, "orders", policy=RetryPolicy(max_attempts=4), sleep=slept.append, seed=7, **kwargs
    )
    return reader, slept


def test_caps_records_and_keeps_big_sequence_numbers_exact():
    client = FakeKinesis(25)
    reader, _ = _reader(client)
    read = reader.read("shardId-0", ShardPosition(), closed_end=None, max_records=10)
    assert read.sequence_numbers[0] == "100000000000000000000000000000000000000000000000000"
    assert read.last_sequence == "100000000000000000000000000000000000000000000000063"
    assert len(read.data) == 10
    assert read.finished is False


class GrowingKinesis(FakeKinesis):
    """A shard that keeps receiving records: every GetRecords call finds 3 new ones, and a reply that
    reaches the tip says MillisBehindLatest 0, as Kinesis does."""

    def get_records(self, ShardIterator, Limit):
        reply = super().get_records(ShardIterator, Limit)
        if reply["Records"] and reply["Records"][-1]["SequenceNumber"] == str(self.seqs[-1]):
            reply["MillisBehindLatest"] = 0
        self.seqs += [self.seqs[-1] + 7 * n for n in (1, 2, 3)]
        return reply


def test_planning_stops_at_the_tip_instead_of_chasing_new_records_to_the_cap():
    client = GrowingKinesis(4)
    reader, _ = _reader(client)
    read = reader.read("shardId-0", ShardPosition(), closed_end=None, max_records=1000)
    # Only what the shard held at the first call; the 3 records that arrived meanwhile wait for the next batch.
    assert len(read.sequence_numbers) == 4
    assert client.get_records_calls == 1
    assert read.finished is False


def test_throttling_is_retried_with_jitter_and_counted():
    client = FakeKinesis(5)
    client.faults = [_error("ProvisionedThroughputExceededException", 400)] * 3
    reader, slept = _reader(client)
    read = reader.read("shardId-0", ShardPosition(), closed_end=None, max_records=5)
    assert [r.decode() for r in read.data] == [f"r{10**50 + 7 * i}" for i in range(5)]
    assert (read.stats.throttled, read.stats.retries) == (3, 3)
    backoff = slept[-3:]  # the pacer may also have slept before the first call
    assert all(0.0 <= s <= cap for s, cap in zip(backoff, [0.1, 0.2, 0.4], strict=True))


def test_throttling_that_never_ends_fails_naming_stream_and_shard():
    client = FakeKinesis(5)
    client.faults = [_error("ProvisionedThroughputExceededException", 400)] * 10
    reader, _ = _reader(client)
    with pytest.raises(
        KinesisReadError, match=r"GetRecords on stream 'orders' shard shardId-0 still failed after 4"
    ):
        reader.read("shardId-0", ShardPosition(), closed_end=None, max_records=5)


@pytest.mark.parametrize("code,status", [("ExpiredIteratorException", 400), ("InternalFailure", 500)])
def test_expired_iterator_is_reacquired_after_the_last_sequence_read(code, status):
    client = FakeKinesis(8)
    reader, _ = _reader(client)
    first = reader.read("shardId-0", ShardPosition(), closed_end=None, max_records=3)
    client.faults = [_error(code, status)]
    read = reader.read(
        "shardId-0", ShardPosition(sequence=first.last_sequence), closed_end=None, max_records=5
    )
    assert read.sequence_numbers == [str(10**50 + 7 * i) for i in range(3, 8)]
    assert read.stats.iterator_refreshes == 1
    assert client.iterator_calls[-1] == {
        "StreamName": "orders",
        "ShardId": "shardId-0",
        "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
        "StartingSequenceNumber": str(10**50 + 14),
    }


def test_closed_shard_is_finished_at_its_ending_sequence_number():
    client = FakeKinesis(6, closed=True)
    reader, _ = _reader(client)
    end = str(10**50 + 35)
    read = reader.read("shardId-0", ShardPosition(), closed_end=end, max_records=100)
    assert (len(read.sequence_numbers), read.finished, read.last_sequence) == (6, True, end)
    # Once there, no GetRecords call is spent on it again.
    calls = client.get_records_calls
    again = reader.read("shardId-0", ShardPosition(sequence=end), closed_end=end, max_records=100)
    assert (again.finished, client.get_records_calls) == (True, calls)


def test_open_shard_caught_up_is_not_finished():
    client = FakeKinesis(4)
    reader, _ = _reader(client)
    read = reader.read("shardId-0", ShardPosition(), closed_end=None, max_records=100)
    assert (len(read.sequence_numbers), read.finished) == (4, False)


def test_replay_reads_exactly_the_planned_range():
    client = FakeKinesis(20)
    reader, _ = _reader(client)
    start, end = str(10**50 + 14), str(10**50 + 49)
    read = reader.read("shardId-0", ShardPosition(sequence=start), closed_end=None, until_sequence=end)
    assert read.sequence_numbers == [str(10**50 + 7 * i) for i in range(3, 8)]


def _expired_position_reader(fail: bool):
    client = FakeKinesis(10, trimmed_below=10**50 + 42)
    now = int((T0 + dt.timedelta(hours=30)).timestamp() * 1000)
    reader, _ = _reader(client, fail_on_data_loss=fail, retention_ms=24 * 3600 * 1000, now_ms=lambda: now)
    position = ShardPosition(sequence=str(10**50 + 14), last_arrival_ms=int(T0.timestamp() * 1000))
    return reader, position


def test_data_loss_fails_naming_stream_shard_and_gap():
    reader, position = _expired_position_reader(fail=True)
    with pytest.raises(DataLossError) as info:
        reader.read("shardId-0", position, closed_end=None, max_records=100)
    message = str(info.value)
    assert "stream 'orders' shard shardId-0" in message
    assert f"after sequence number {10**50 + 14}" in message and f"before {10**50 + 42}" in message
    assert "--fail-on-data-loss false" in message


def test_data_loss_tolerated_is_reported_and_reading_resumes_at_trim_horizon():
    reader, position = _expired_position_reader(fail=False)
    read = reader.read("shardId-0", position, closed_end=None, max_records=100)
    assert read.sequence_numbers == [str(10**50 + 7 * i) for i in range(6, 10)]
    assert read.lost is not None and "shardId-0" in read.lost


def test_starting_positions():
    assert parse_starting_position("trim-horizon") == "TRIM_HORIZON"
    assert parse_starting_position("at-timestamp=2026-01-01T00:00:01Z") == "AT_TIMESTAMP:1767225601000"
    assert parse_starting_position("at-timestamp=2026-01-01T00:00:01") == "AT_TIMESTAMP:1767225601000"
    assert parse_starting_position("latest", now=T0) == "AT_TIMESTAMP:1767225600000"


@pytest.mark.parametrize(
    "code,expected",
    [
        ("UnrecognizedClientException", StreamAccessError),
        (
            "KMSAccessDeniedException",
            StreamAccessError,
        ),  # GetRecords on an encrypted stream without kms:Decrypt
        ("ResourceNotFoundException", StreamNotFoundError),
    ],
)
def test_access_errors_name_stream_and_region(code, expected):
    error = _error(code, 400, "ListShards")
    with pytest.raises(expected, match=r"stream 'orders' in region 'eu-west-3'"):
        explain_access_error(error, stream="orders", region="eu-west-3", endpoint_url=None)


def test_offset_log_and_pinned_start_on_s3(moto_endpoint, unique_name):
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=unique_name)
    checkpoint = f"s3://{unique_name}/checkpoints/ingest"
    offset = {
        "stream": "orders",
        "shards": {"shardId-0": {"seq": "42", "from": "TRIM_HORIZON", "done": False}},
    }
    for batch, text in [(0, '{"stream": "other", "shards": {}}'), (7, json.dumps(offset))]:
        body = f'v1\n{{"batchWatermarkMs":0}}\n{text}'
        s3.put_object(Bucket=unique_name, Key=f"checkpoints/ingest/offsets/{batch}", Body=body.encode())
    assert last_logged_offset(checkpoint, "orders", lambda: s3) == (7, offset)
    assert last_logged_offset(checkpoint, "other", lambda: s3) == (0, {"stream": "other", "shards": {}})
    assert pinned_start(checkpoint, "AT_TIMESTAMP:1", lambda: s3) == "AT_TIMESTAMP:1"
    assert pinned_start(checkpoint, "AT_TIMESTAMP:2", lambda: s3) == "AT_TIMESTAMP:1"


def test_metrics_on_s3_keep_the_newest_batches_and_say_when_one_is_gone(moto_endpoint, unique_name):
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=unique_name)
    checkpoint = f"s3://{unique_name}/checkpoints/ingest"
    files = metrics_files(checkpoint, lambda: s3, retain=4)
    for batch in range(12):
        files.write(batch, {"batch_id": batch, "records": batch * 10})
    listed = s3.list_objects_v2(Bucket=unique_name, Prefix="checkpoints/ingest/sources/kinesis/metrics/")
    assert [obj["Key"].rsplit("/", 1)[1] for obj in listed["Contents"]] == [
        "batch-0000000008.json",
        "batch-0000000009.json",
        "batch-0000000010.json",
        "batch-0000000011.json",
    ]
    assert read_metrics(checkpoint, lambda: s3, batch_id=9) == [{"batch_id": 9, "records": 90}]
    assert read_metrics(checkpoint, lambda: s3, batch_id=20) == []  # not planned yet
    with pytest.raises(BatchNotKeptError, match=r"batch 3's file .* is no longer kept: .* \(8\.\.11 now\)"):
        read_metrics(checkpoint, lambda: s3, batch_id=3)
    assert [m["records"] for m in read_metrics(checkpoint, lambda: s3)] == [80, 90, 100, 110]
