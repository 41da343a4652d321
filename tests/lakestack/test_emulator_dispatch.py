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
