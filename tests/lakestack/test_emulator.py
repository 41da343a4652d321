"""The embedded emulator keeps every acknowledged record, also with producers writing one shard at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import boto3


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
