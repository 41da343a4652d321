"""The embedded emulator keeps every acknowledged record, also with producers writing one shard at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config


def test_concurrent_producers_on_one_shard_lose_nothing(moto_endpoint, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    kinesis.create_stream(StreamName=unique_name, ShardCount=1)

    def produce(worker: int) -> tuple[int, list[tuple[str, str]]]:
        """Send 15 batches of 20; return the failed-entry count and what was acknowledged."""
        client = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
        failed, acked = 0, []
        for batch in range(15):
            records = [{"Data": f"{worker}-{batch}-{n}".encode(), "PartitionKey": "k"} for n in range(20)]
            reply = client.put_records(StreamName=unique_name, Records=records)
            failed += reply["FailedRecordCount"]
            acked.extend(
                (r["ShardId"], r["SequenceNumber"]) for r in reply["Records"] if "SequenceNumber" in r
            )
        return failed, acked

    # The results come back to this thread, so a failure is asserted here instead of lost in a worker.
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(produce, range(6)))
    assert [failed for failed, _ in results] == [0] * 6
    acknowledged = [ack for _, acked in results for ack in acked]
    assert len(acknowledged) == 1800
    assert len(set(acknowledged)) == 1800  # no sequence number handed out twice
    shard = kinesis.list_shards(StreamName=unique_name)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName=unique_name, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    stored = kinesis.get_records(ShardIterator=iterator, Limit=10_000)["Records"]
    assert len(stored) == 1800
    assert len({record["Data"] for record in stored}) == 1800


def test_readers_beside_producers_on_one_shard_get_every_record_in_order(moto_endpoint, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    kinesis.create_stream(StreamName=unique_name, ShardCount=1)
    shard = kinesis.list_shards(StreamName=unique_name)["Shards"][0]["ShardId"]
    # A long shard: moto's own GetRecords walked every record, so a put landing meanwhile broke the walk.
    for batch in range(40):
        records = [{"Data": f"old-{batch}-{n}".encode(), "PartitionKey": "k"} for n in range(500)]
        assert kinesis.put_records(StreamName=unique_name, Records=records)["FailedRecordCount"] == 0

    def produce(worker: int) -> int:
        client = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
        failed = 0
        for batch in range(20):
            records = [{"Data": f"{worker}-{batch}-{n}".encode(), "PartitionKey": "k"} for n in range(50)]
            failed += client.put_records(StreamName=unique_name, Records=records)["FailedRecordCount"]
        return failed

    def read(_: int) -> list[int]:
        """Read the shard until 4,000 records came back; every GetRecords must answer (no HTTP 500)."""
        client = boto3.client(
            "kinesis",
            endpoint_url=moto_endpoint,
            region_name="us-east-1",
            config=Config(retries={"total_max_attempts": 1}),  # a 500 must fail the test, not be retried
        )
        iterator = client.get_shard_iterator(
            StreamName=unique_name,
            ShardId=shard,
            ShardIteratorType="AFTER_SEQUENCE_NUMBER",
            StartingSequenceNumber="20000",
        )["ShardIterator"]
        seen: list[int] = []
        for _call in range(2_000):
            reply = client.get_records(ShardIterator=iterator, Limit=300)
            seen.extend(int(r["SequenceNumber"]) for r in reply["Records"])
            iterator = reply["NextShardIterator"]
            if len(seen) == 4_000:
                break
        return seen

    with ThreadPoolExecutor(max_workers=6) as pool:
        readers = [pool.submit(read, r) for r in range(2)]
        producers = list(pool.map(produce, range(4)))
        read_back = [reader.result(timeout=120) for reader in readers]
    assert producers == [0, 0, 0, 0]
    assert [len(seen) for seen in read_back] == [4_000, 4_000]
    assert read_back[0] == read_back[1] == list(range(20_001, 24_001))


def test_get_records_answers_as_moto_does():
    from moto.kinesis.models import Shard

    from lakestack.emulator.server import patch_kinesis

    patch_kinesis()
    shard = Shard(0, 0, 2**128)
    assert shard.get_records("0", 10) == ([], 0, 0)
    for n in range(5):
        shard.put_record("k", f"r{n}", None)
    records, last, behind = shard.get_records("2", 2)
    assert ([r.sequence_number for r in records], last) == ([3, 4], 4)
    assert 0 <= behind < 1_000
    records, last, _ = shard.get_records("0", None)
    assert ([r.data for r in records], last) == (["r0", "r1", "r2", "r3", "r4"], 5)
    assert shard.get_records("5", 10) == ([], 5, 0)
    assert shard.get_records("9", 10) == ([], 9, 0)


def test_records_keep_moto_times_and_the_reply_truncates_them_to_milliseconds():
    import datetime as dt

    from moto.core.utils import unix_time
    from moto.kinesis.models import Record

    from lakestack.emulator.server import _epoch_millis, patch_kinesis

    patch_kinesis()
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    record = Record("k", "ZGF0YQ==", 7, "")
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert (record.partition_key, record.data, record.sequence_number, record.explicit_hash_key) == (
        "k",
        "ZGF0YQ==",
        7,
        "",
    )
    assert before <= record.created_at_datetime <= after
    assert record.created_at == unix_time(record.created_at_datetime)  # moto's own arithmetic, to the bit
    assert _epoch_millis(dt.datetime(2026, 11, 24, 16, 0, 0, 123456)) == 1795536000.123
    assert _epoch_millis(dt.datetime(2026, 11, 24, 16, 0, 0, 999)) == 1795536000.0
    assert isinstance(_epoch_millis(dt.datetime(2026, 11, 24, 16, 0, 0, 999)), float)
    assert _epoch_millis(dt.datetime(2026, 11, 24, 16, 0, 0)) == 1795536000
    assert isinstance(_epoch_millis(dt.datetime(2026, 11, 24, 16, 0, 0)), int)
