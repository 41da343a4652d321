"""The kit's emulator answers PutRecords and GetRecords with moto's own replies, byte for byte, and stores what it
acknowledges: the emulator writes those two replies itself (moto's generic serializer was most of its CPU), so
these tests hold it to what moto itself answers and to literal stored records."""

from __future__ import annotations

import base64
import http.client
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from lakestack.emulator import free_port

TARGET = "Kinesis_20131202."
AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=lakestack-local/20261124/us-east-1/kinesis/aws4_request, "
    "SignedHeaders=host;x-amz-target, Signature=" + "0" * 64
)
QUARTER = 2**128 // 4  # moto's 4 shards split the hash key space evenly


@pytest.fixture(scope="module")
def plain_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's own server (``python -m moto.server``), unpatched: the reference the kit's emulator must match."""
    port = free_port()
    log = (tmp_path_factory.mktemp("plain-moto") / "moto.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                call(f"http://127.0.0.1:{port}", "ListStreams", {})
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def call(endpoint: str, operation: str, payload: dict) -> tuple[int, dict[str, str], bytes]:
    """One raw Kinesis call: (status, headers with lower-case names, body)."""
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST",
            "/",
            body=json.dumps(payload).encode(),
            headers={
                "Content-Type": "application/x-amz-json-1.1",
                "X-Amz-Target": TARGET + operation,
                "Authorization": AUTHORIZATION,
            },
        )
        reply = connection.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        connection.close()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def scenario(endpoint: str, stream: str) -> list[tuple[int, str, bytes]]:
    """The same calls against an endpoint; returns (status, content type, body) of the PutRecords and
    GetRecords calls, arrival times and lag masked (they are clocks, not contents)."""
    assert call(endpoint, "CreateStream", {"StreamName": stream, "ShardCount": 4})[0] == 200
    replies = []

    def keep(operation: str, payload: dict) -> bytes:
        status, headers, body = call(endpoint, operation, payload)
        masked = re.sub(
            rb'"ApproximateArrivalTimestamp": \d+(\.\d{1,3})?', b'"ApproximateArrivalTimestamp": T', body
        )
        masked = re.sub(rb'"MillisBehindLatest": \d+', b'"MillisBehindLatest": M', masked)
        replies.append((status, headers.get("content-type", ""), masked))
        return body

    records = [{"Data": b64(f"event-{n}"), "PartitionKey": f"key-{n % 7}"} for n in range(40)]
    records += [{"Data": b64("edge"), "PartitionKey": "x", "ExplicitHashKey": str(QUARTER * 3)}]
    records += [{"Data": base64.b64encode(bytes(range(256))).decode(), "PartitionKey": "binary"}]
    keep("PutRecords", {"StreamName": stream, "Records": records})
    arn = f"arn:aws:kinesis:us-east-1:123456789012:stream/{stream}"
    keep("PutRecords", {"StreamARN": arn, "Records": [{"Data": b64("by-arn"), "PartitionKey": "key-1"}]})
    # Refused calls: an unknown stream, too many entries, a partition key over 256 characters.
    keep("PutRecords", {"StreamName": stream + "-missing", "Records": records[:1]})
    keep("PutRecords", {"StreamName": stream, "Records": records[:1] * 501})
    keep("PutRecords", {"StreamName": stream, "Records": [{"Data": b64("long"), "PartitionKey": "k" * 257}]})
    for shard in range(4):
        iterator = json.loads(
            call(
                endpoint,
                "GetShardIterator",
                {
                    "StreamName": stream,
                    "ShardId": f"shardId-{shard:012d}",
                    "ShardIteratorType": "TRIM_HORIZON",
                },
            )[2]
        )["ShardIterator"]
        first = json.loads(keep("GetRecords", {"ShardIterator": iterator, "Limit": 5}))
        following = json.loads(keep("GetRecords", {"ShardIterator": first["NextShardIterator"]}))
        keep("GetRecords", {"ShardIterator": following["NextShardIterator"], "Limit": 10})
    keep("GetRecords", {"ShardIterator": "not-an-iterator"})
    return replies


def test_put_and_get_records_reply_as_moto_does(moto_endpoint, plain_moto, unique_name):
    ours, moto = scenario(moto_endpoint, unique_name), scenario(plain_moto, unique_name)
    assert len(ours) == 18
    assert [status for status, _, _ in ours] == [200, 200, 400, 400, 400] + [200] * 12 + [500]
    for index, (mine, theirs) in enumerate(zip(ours, moto, strict=True)):
        assert mine == theirs, f"reply {index} differs from moto's"


def test_arrival_times_are_epoch_seconds_in_milliseconds(moto_endpoint, unique_name):
    assert call(moto_endpoint, "CreateStream", {"StreamName": unique_name, "ShardCount": 1})[0] == 200
    before = time.time()
    call(
        moto_endpoint,
        "PutRecords",
        {"StreamName": unique_name, "Records": [{"Data": b64("a"), "PartitionKey": "k"}]},
    )
    after = time.time()
    iterator = json.loads(
        call(
            moto_endpoint,
            "GetShardIterator",
            {
                "StreamName": unique_name,
                "ShardId": "shardId-000000000000",
                "ShardIteratorType": "TRIM_HORIZON",
            },
        )[2]
    )["ShardIterator"]
    body = call(moto_endpoint, "GetRecords", {"ShardIterator": iterator})[2]
    stamp = re.search(rb'"ApproximateArrivalTimestamp": (\d+(?:\.\d{1,3})?)[,}]', body)
    assert stamp is not None, body
    assert before - 0.001 <= float(stamp.group(1)) <= after


def test_every_acknowledged_record_is_stored_on_its_shard_in_order(moto_endpoint, unique_name):
    assert call(moto_endpoint, "CreateStream", {"StreamName": unique_name, "ShardCount": 4})[0] == 200
    # Explicit hash keys at both ends of each shard's range: moto's routing, not a copy of it, decides.
    records = [
        {"Data": b64(f"r{n}"), "PartitionKey": "ignored", "ExplicitHashKey": str(key)}
        for n, key in enumerate([0, QUARTER + 5, QUARTER * 2, QUARTER * 3 + 1, QUARTER - 2, 7])
    ]
    status, _, body = call(moto_endpoint, "PutRecords", {"StreamName": unique_name, "Records": records})
    assert status == 200
    assert json.loads(body) == {
        "FailedRecordCount": 0,
        "Records": [
            {"SequenceNumber": "1", "ShardId": "shardId-000000000000"},
            {"SequenceNumber": "1", "ShardId": "shardId-000000000001"},
            {"SequenceNumber": "1", "ShardId": "shardId-000000000002"},
            {"SequenceNumber": "1", "ShardId": "shardId-000000000003"},
            {"SequenceNumber": "2", "ShardId": "shardId-000000000000"},
            {"SequenceNumber": "3", "ShardId": "shardId-000000000000"},
        ],
    }
    stored = {}
    for shard in range(4):
        iterator = json.loads(
            call(
                moto_endpoint,
                "GetShardIterator",
                {
                    "StreamName": unique_name,
                    "ShardId": f"shardId-{shard:012d}",
                    "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                    "StartingSequenceNumber": "0",
                },
            )[2]
        )["ShardIterator"]
        reply = json.loads(call(moto_endpoint, "GetRecords", {"ShardIterator": iterator, "Limit": 100})[2])
        stored[shard] = [
            (r["SequenceNumber"], base64.b64decode(r["Data"]).decode(), r["PartitionKey"])
            for r in reply["Records"]
        ]
    assert stored == {
        0: [("1", "r0", "ignored"), ("2", "r4", "ignored"), ("3", "r5", "ignored")],
        1: [("1", "r1", "ignored")],
        2: [("1", "r2", "ignored")],
        3: [("1", "r3", "ignored")],
    }
