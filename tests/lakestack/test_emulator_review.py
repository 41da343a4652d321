"""The emulator's dispatch, PutRecords validation and HTTP handling against what a reviewer found broken."""

from __future__ import annotations

import json

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
