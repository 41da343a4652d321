"""The fault layer in front of moto, in-process with a fake moto behind it: what reaches moto, what the client
gets back, and how faults are counted as injected and survived."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from werkzeug.test import Client

from lakestack.emulator.fault_layer import CONTROL_PATH, FaultLayer, FaultTally
from lakestack.emulator.faults import parse_fault_spec

S3_AUTH = "AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"
KINESIS_AUTH = S3_AUTH.replace("/s3/", "/kinesis/")


class FakeMoto:
    """Accepts every PutRecords entry, knows one stream ("s"), serves any S3 request; records what it got."""

    def __init__(self) -> None:
        self.received: list[tuple[str, Any]] = []
        self.sequence = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        target = str(environ.get("HTTP_X_AMZ_TARGET", "")).rpartition(".")[2]
        if not target:
            self.received.append((f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}", body))
            start_response("200 OK", [("Content-Type", "application/xml")])
            return [b"<ok/>"]
        params = json.loads(body)
        self.received.append((target, params))
        if params.get("StreamName") != "s":
            return self._reply(start_response, "400 Bad Request", {"__type": "ResourceNotFoundException"})
        if target == "PutRecords":
            records = []
            for _ in params["Records"]:
                self.sequence += 1
                records.append({"SequenceNumber": str(self.sequence), "ShardId": "shardId-000000000000"})
            return self._reply(start_response, "200 OK", {"FailedRecordCount": 0, "Records": records})
        return self._reply(start_response, "200 OK", {"Records": [], "MillisBehindLatest": 0})

    @staticmethod
    def _reply(start_response: Any, status: str, payload: dict[str, Any]) -> list[bytes]:
        body = json.dumps(payload).encode()
        start_response(
            status, [("Content-Type", "application/x-amz-json-1.1"), ("Content-Length", str(len(body)))]
        )
        return [body]


def entries(*data: str) -> list[dict[str, str]]:
    return [{"Data": base64.b64encode(d.encode()).decode(), "PartitionKey": f"pk-{d}"} for d in data]


def kinesis(client: Client, operation: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    reply = client.post(
        "/",
        data=json.dumps(params),
        headers={
            "X-Amz-Target": f"Kinesis_20131202.{operation}",
            "Authorization": KINESIS_AUTH,
            "Content-Type": "application/x-amz-json-1.1",
        },
    )
    return reply.status_code, json.loads(reply.data)


def armed(spec: str, seed: int = 7) -> tuple[Client, FakeMoto, FaultLayer]:
    moto = FakeMoto()
    layer = FaultLayer(moto)
    layer.arm(parse_fault_spec(spec), seed)
    return Client(layer), moto, layer


def sent_data(moto: FakeMoto) -> list[list[str]]:
    return [
        [base64.b64decode(r["Data"]).decode() for r in params["Records"]]
        for target, params in moto.received
        if target == "PutRecords"
    ]


def test_unarmed_layer_hands_every_request_to_moto_unchanged():
    moto = FakeMoto()
    client = Client(FaultLayer(moto))
    status, reply = kinesis(client, "PutRecords", {"StreamName": "s", "Records": entries("a", "b")})
    assert status == 200
    assert reply["FailedRecordCount"] == 0
    assert sent_data(moto) == [["a", "b"]]


def test_throttled_entries_fail_inside_a_200_reply_and_never_reach_the_stream():
    client, moto, layer = armed("put-throttle=0.5", seed=3)
    status, reply = kinesis(client, "PutRecords", {"StreamName": "s", "Records": entries(*"abcdefgh")})

    assert status == 200
    codes = [record.get("ErrorCode") for record in reply["Records"]]
    accepted = [d for d, code in zip("abcdefgh", codes, strict=True) if code is None]
    assert 0 < len(accepted) < 8
    assert reply["FailedRecordCount"] == 8 - len(accepted)
    assert set(codes) == {None, "ProvisionedThroughputExceededException"}
    # Only the accepted entries reached moto, in their order; the sequence numbers are moto's.
    assert sent_data(moto) == [accepted]
    assert [r["SequenceNumber"] for r in reply["Records"] if "SequenceNumber" in r] == [
        str(n) for n in range(1, len(accepted) + 1)
    ]
    counts = layer.snapshot()["kinds"]["put-throttle"]
    assert (counts["seen"], counts["injected"], counts["survived"]) == (8, 8 - len(accepted), 0)


def test_resending_the_failed_entries_counts_them_survived():
    client, _, layer = armed("put-throttle=0.5", seed=3)
    _, first = kinesis(client, "PutRecords", {"StreamName": "s", "Records": entries(*"abcdefgh")})
    failed = [d for d, r in zip("abcdefgh", first["Records"], strict=True) if "ErrorCode" in r]
    layer.stop()

    _, second = kinesis(client, "PutRecords", {"StreamName": "s", "Records": entries(*failed[:-1])})

    assert second["FailedRecordCount"] == 0
    counts = layer.snapshot()["kinds"]["put-throttle"]
    assert (counts["injected"], counts["survived"]) == (len(failed), len(failed) - 1)
    assert counts["open"] == [f"entry s pk-{failed[-1]} {_digest(failed[-1])}"]
    assert layer.snapshot()["armed"] is False


def _digest(data: str) -> str:
    import hashlib

    return hashlib.sha1(base64.b64encode(data.encode())).hexdigest()


def test_when_every_entry_fails_moto_is_only_asked_whether_the_stream_exists():
    client, moto, _ = armed("put-throttle=1")
    status, reply = kinesis(client, "PutRecords", {"StreamName": "s", "Records": entries("a", "b", "c")})
    assert status == 200
    assert reply["FailedRecordCount"] == 3
    assert [target for target, _ in moto.received] == ["DescribeStreamSummary"]

    status, reply = kinesis(client, "PutRecords", {"StreamName": "missing", "Records": entries("a")})
    assert (status, reply) == (400, {"__type": "ResourceNotFoundException"})


def test_get_records_faults_are_400s_with_the_real_error_types():
    client, _, layer = armed("get-throttle=1")
    status, reply = kinesis(client, "GetRecords", {"ShardIterator": "not-one-of-motos"})
    assert status == 400
    assert reply["__type"] == "ProvisionedThroughputExceededException"
    assert reply["message"] == "Rate exceeded for Shard - 123456789012/?/?"

    client, _, _ = armed("iterator-expiry=1")
    status, reply = kinesis(client, "GetRecords", {"ShardIterator": "x"})
    assert (status, reply["__type"]) == (400, "ExpiredIteratorException")
    assert reply["message"].startswith("Iterator expired. The iterator was created at time ")
    assert layer.snapshot()["kinds"]["get-throttle"]["injected"] == 1


def test_kinesis_5xx_hits_any_operation_with_internal_failure_or_service_unavailable():
    client, moto, layer = armed("kinesis-5xx=1")
    replies = [kinesis(client, "ListShards", {"StreamName": "s"}) for _ in range(12)]
    assert {(status, reply["__type"]) for status, reply in replies} == {
        (500, "InternalFailure"),
        (503, "ServiceUnavailable"),
    }
    assert moto.received == []
    layer.stop()
    kinesis(client, "ListShards", {"StreamName": "s"})
    counts = layer.snapshot()["kinds"]["kinesis-5xx"]
    assert (counts["injected"], counts["survived"]) == (12, 12)


def test_s3_slow_down_reads_the_upload_and_answers_with_the_xml_error():
    client, moto, layer = armed("s3-503=1")
    body = io.BytesIO(b"x" * 100_000)
    reply = client.put(
        "/bucket/key", input_stream=body, headers={"Authorization": S3_AUTH, "Content-Length": "100000"}
    )
    assert reply.status_code == 503
    assert b"<Code>SlowDown</Code><Message>Please reduce your request rate.</Message>" in reply.data
    assert reply.headers["Content-Type"] == "application/xml"
    assert body.tell() == 100_000  # read to the end, so the client gets the reply rather than a reset
    head = client.head("/bucket/key", headers={"Authorization": S3_AUTH})
    assert (head.status_code, head.data) == (503, b"")
    assert moto.received == []
    layer.stop()
    client.head("/bucket/key", headers={"Authorization": S3_AUTH})
    counts = layer.snapshot()["kinds"]["s3-503"]
    assert (counts["seen"], counts["injected"], counts["survived"]) == (2, 2, 1)
    assert counts["open"] == ["s3 PUT /bucket/key "]


def test_the_same_seed_makes_the_same_decisions():
    def failures(seed: int) -> list[list[bool]]:
        client, _, _ = armed("put-throttle=0.3", seed=seed)
        return [
            [
                "ErrorCode" in r
                for r in kinesis(
                    client, "PutRecords", {"StreamName": "s", "Records": entries(*"abcdefghij")}
                )[1]["Records"]
            ]
            for _ in range(5)
        ]

    assert failures(11) == failures(11)
    assert failures(11) != failures(12)


def test_the_control_path_arms_reports_and_refuses_a_bad_spec():
    client = Client(FaultLayer(FakeMoto()))
    assert json.loads(client.get(CONTROL_PATH).data)["armed"] is False
    bad = client.post(CONTROL_PATH, data=json.dumps({"spec": "s3-503=2"}))
    assert bad.status_code == 400
    assert "expected a share between 0 and 1" in json.loads(bad.data)["error"]
    good = json.loads(client.post(CONTROL_PATH, data=json.dumps({"spec": "s3-503=5%", "seed": 4})).data)
    assert {k: good[k] for k in ("armed", "spec", "seed")} == {
        "armed": True,
        "spec": "s3-503=0.05",
        "seed": 4,
    }
    assert good["kinds"] == {"s3-503": {"seen": 0, "injected": 0, "survived": 0}}


def test_a_fault_on_a_whole_call_survives_only_when_every_entry_it_carried_is_accepted():
    tally = FaultTally()
    tally.inject("kinesis-5xx", ["a", "b", "c"])
    tally.resolve(["a", "b"])
    assert tally.survived["kinesis-5xx"] == 0
    tally.resolve(["c", "unrelated"])
    assert (tally.injected["kinesis-5xx"], tally.survived["kinesis-5xx"], tally.has_open) == (1, 1, False)
