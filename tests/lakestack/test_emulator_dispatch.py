"""The emulator's Kinesis dispatch, PutRecords validation before anything is stored, and its HTTP limits."""

from __future__ import annotations

import json

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from lakestack.emulator.server import KinesisDispatch, patch_kinesis

SIGNED = (
    "AWS4-HMAC-SHA256 Credential=lakestack-local/20261124/us-east-1/kinesis/aws4_request, "
    "SignedHeaders=host;x-amz-target, Signature=" + "0" * 64
)


def kinesis(client: Client, operation: str, payload: dict, *, signed: bool = True) -> tuple[int, str, bytes]:
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "Kinesis_20131202." + operation}
    if signed:
        headers["Authorization"] = SIGNED
    reply = client.post("/", data=json.dumps(payload), headers=headers)
    return reply.status_code, reply.headers.get("Content-Type", ""), reply.get_data()


def test_an_unsigned_first_kinesis_call_does_not_route_later_ones_elsewhere(unique_name):
    patch_kinesis()
    client = Client(KinesisDispatch(DomainDispatcherApplication(create_backend_app)))
    kinesis(client, "ListStreams", {}, signed=False)  # moto resolves this one to S3
    status, content_type, body = kinesis(client, "CreateStream", {"StreamName": unique_name, "ShardCount": 1})
    assert (status, content_type) == (200, "application/x-amz-json-1.1")
    status, content_type, body = kinesis(client, "ListStreams", {})
    assert (status, content_type) == (200, "application/x-amz-json-1.1")
    assert unique_name in json.loads(body)["StreamNames"]


def stored(client: Client, stream: str) -> list[str]:
    """Every record's data on the stream's only shard, base64 as the emulator returns it."""
    iterator = json.loads(
        kinesis(
            client,
            "GetShardIterator",
            {"StreamName": stream, "ShardId": "shardId-000000000000", "ShardIteratorType": "TRIM_HORIZON"},
        )[2]
    )["ShardIterator"]
    status, _, body = kinesis(client, "GetRecords", {"ShardIterator": iterator})
    assert status == 200
    return [record["Data"] for record in json.loads(body)["Records"]]


GOOD = [{"Data": "b2s=", "PartitionKey": "k"}] * 3


@pytest.mark.parametrize(
    ("bad", "status", "error"),
    [
        ({"Data": "YmFk", "PartitionKey": "k" * 257}, 400, "InvalidArgumentException"),
        (
            {"Data": "YmFk", "PartitionKey": "k", "ExplicitHashKey": str(2**128)},
            400,
            "InvalidArgumentException",
        ),
        ({"Data": "YmFk", "PartitionKey": "k", "ExplicitHashKey": "12x"}, 400, "ValidationException"),
        ({"Data": "YmFk", "PartitionKey": "k", "ExplicitHashKey": "1\u0663"}, 400, "ValidationException"),
        ({"Data": "YmFk"}, 400, "InvalidArgumentException"),
        ({"Data": "YmFk", "PartitionKey": ""}, 400, "ValidationException"),
        ({"PartitionKey": "k"}, 400, "ValidationException"),
        ({"Data": "not base64!", "PartitionKey": "k"}, 400, "SerializationException"),
    ],
)
def test_a_refused_put_records_call_stores_none_of_its_entries(unique_name, bad, status, error):
    patch_kinesis()
    client = Client(KinesisDispatch(DomainDispatcherApplication(create_backend_app)))
    stream = unique_name
    assert kinesis(client, "CreateStream", {"StreamName": stream, "ShardCount": 1})[0] == 200
    reply_status, _, body = kinesis(client, "PutRecords", {"StreamName": stream, "Records": [*GOOD, bad]})
    assert (reply_status, json.loads(body)["__type"]) == (status, error)
    assert stored(client, stream) == []
    # and the shard still serves what is stored afterwards
    assert kinesis(client, "PutRecords", {"StreamName": stream, "Records": GOOD})[0] == 200
    assert stored(client, stream) == ["b2s=", "b2s=", "b2s="]


def test_put_records_without_entries_is_refused(unique_name):
    patch_kinesis()
    client = Client(KinesisDispatch(DomainDispatcherApplication(create_backend_app)))
    assert kinesis(client, "CreateStream", {"StreamName": unique_name, "ShardCount": 1})[0] == 200
    status, _, body = kinesis(client, "PutRecords", {"StreamName": unique_name, "Records": []})
    assert (status, json.loads(body)["__type"]) == (400, "ValidationException")


def test_a_hash_key_equal_to_a_shards_ending_hash_key_is_stored_on_that_shard(unique_name):
    patch_kinesis()
    client = Client(KinesisDispatch(DomainDispatcherApplication(create_backend_app)))
    stream = unique_name
    assert kinesis(client, "CreateStream", {"StreamName": stream, "ShardCount": 2})[0] == 200
    shards = json.loads(kinesis(client, "DescribeStream", {"StreamName": stream})[2])["StreamDescription"][
        "Shards"
    ]
    first_end = shards[0]["HashKeyRange"]["EndingHashKey"]
    records = [
        {"Data": "b2s=", "PartitionKey": "k"},
        {"Data": "ZWRnZQ==", "PartitionKey": "k", "ExplicitHashKey": first_end},
    ]
    status, _, body = kinesis(client, "PutRecords", {"StreamName": stream, "Records": records})
    reply = json.loads(body)
    assert (status, reply["FailedRecordCount"]) == (200, 0)
    assert reply["Records"][1]["ShardId"] == "shardId-000000000000"
    assert "ZWRnZQ==" in stored(client, stream)


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ({"PartitionKey": "k"}, "ValidationException"),
        ({"Data": "not base64!", "PartitionKey": "k"}, "SerializationException"),
    ],
)
def test_a_refused_put_record_call_stores_nothing(unique_name, record, error):
    patch_kinesis()
    client = Client(KinesisDispatch(DomainDispatcherApplication(create_backend_app)))
    stream = unique_name
    assert kinesis(client, "CreateStream", {"StreamName": stream, "ShardCount": 1})[0] == 200
    status, _, body = kinesis(client, "PutRecord", {"StreamName": stream, **record})
    assert (status, json.loads(body)["__type"]) == (400, error)
    assert stored(client, stream) == []
    assert kinesis(client, "PutRecord", {"StreamName": stream, "Data": "b2s=", "PartitionKey": "k"})[0] == 200
    assert stored(client, stream) == ["b2s="]
