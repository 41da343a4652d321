"""The embedded emulator keeps every acknowledged record, also with producers writing one shard at once."""

from __future__ import annotations

import threading

import boto3


def test_concurrent_producers_on_one_shard_lose_nothing(moto_endpoint, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    kinesis.create_stream(StreamName=unique_name, ShardCount=1)
    acknowledged: list[tuple[str, str]] = []
    guard = threading.Lock()

    def produce(worker: int) -> None:
        client = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
        for batch in range(15):
            records = [{"Data": f"{worker}-{batch}-{n}".encode(), "PartitionKey": "k"} for n in range(20)]
            reply = client.put_records(StreamName=unique_name, Records=records)
            assert reply["FailedRecordCount"] == 0
            with guard:
                acknowledged.extend((r["ShardId"], r["SequenceNumber"]) for r in reply["Records"])

    threads = [threading.Thread(target=produce, args=(worker,)) for worker in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(acknowledged) == 1800
    assert len(set(acknowledged)) == 1800  # no sequence number handed out twice
    shard = kinesis.list_shards(StreamName=unique_name)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName=unique_name, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    stored = kinesis.get_records(ShardIterator=iterator, Limit=10_000)["Records"]
    assert len(stored) == 1800
    assert len({record["Data"] for record in stored}) == 1800
