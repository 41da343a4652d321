"""The emulator's faults as botocore sees them over HTTP: the error codes it parses, the exception classes it
raises, whether its standard retry mode retries them, and how the kit's own clients classify them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from jobs.sources._client import EXPIRED_CODES, is_retryable, is_throttled
from lakestack.emulator import free_port, read_faults, stop_faults
from loadtest.clients.kinesis import RETRYABLE_CALL_ERRORS, RETRYABLE_ENTRY_ERRORS

ROOT = Path(__file__).resolve().parents[2]
STREAM = "faults"
BUCKET = "lakestack-faults"
# botocore's standard retry mode, three attempts: RetryAttempts tells whether it judged an error retryable.
STANDARD = Config(retries={"mode": "standard", "total_max_attempts": 3}, connect_timeout=5, read_timeout=10)


@pytest.fixture(scope="module")
def faulty(faulty_endpoint: str) -> str:
    """The faulty emulator with this module's stream (one shard) and bucket."""
    boto3.client("kinesis", endpoint_url=faulty_endpoint, region_name="us-east-1").create_stream(
        StreamName=STREAM, ShardCount=1
    )
    boto3.client("s3", endpoint_url=faulty_endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return faulty_endpoint


@pytest.fixture
def arm(faulty: str, faults):
    return faults


def client(service: str, endpoint: str, config: Config = STANDARD):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1", config=config)


def iterator(kinesis) -> str:
    return kinesis.get_shard_iterator(
        StreamName=STREAM, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]


def test_get_records_throttling_is_the_modeled_exception_and_botocore_retries_it(faulty, arm):
    kinesis = client("kinesis", faulty)
    shard_iterator = iterator(kinesis)
    arm("get-throttle=1")
    with pytest.raises(kinesis.exceptions.ProvisionedThroughputExceededException) as caught:
        kinesis.get_records(ShardIterator=shard_iterator)
    response = caught.value.response
    assert response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert (
        response["Error"]["Message"]
        == f"Rate exceeded for Shard - 123456789012/{STREAM}/shardId-000000000000"
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert response["ResponseMetadata"]["RetryAttempts"] == 2  # botocore treats it as throttling
    assert is_throttled(caught.value) and is_retryable(caught.value)
    assert read_faults(faulty)["kinds"]["get-throttle"] == {
        "seen": 3,
        "injected": 3,
        "survived": 0,
        "open": [f"GetRecords {STREAM} shardId-000000000000"],
    }


def test_expired_iterator_is_the_modeled_exception_and_not_retried_by_botocore(faulty, arm):
    kinesis = client("kinesis", faulty)
    shard_iterator = iterator(kinesis)
    arm("iterator-expiry=1")
    with pytest.raises(kinesis.exceptions.ExpiredIteratorException) as caught:
        kinesis.get_records(ShardIterator=shard_iterator)
    response = caught.value.response
    assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == (
        "ExpiredIteratorException",
        400,
    )
    assert response["ResponseMetadata"]["RetryAttempts"] == 0
    assert "tolerated delay of 300000 milliseconds" in response["Error"]["Message"]
    # The source must re-acquire the iterator itself: it is not a retryable error, it is an expired one.
    assert response["Error"]["Code"] in EXPIRED_CODES and not is_retryable(caught.value)


def test_kinesis_5xx_is_internal_failure_or_service_unavailable_and_retried(faulty, arm):
    arm("kinesis-5xx=1", seed=2)
    kinesis = client("kinesis", faulty)
    seen = set()
    for _ in range(8):
        with pytest.raises(ClientError) as caught:
            kinesis.list_shards(StreamName=STREAM)
        response = caught.value.response
        seen.add((response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]))
        assert response["ResponseMetadata"]["RetryAttempts"] == 2
        assert is_retryable(caught.value)
        assert response["Error"]["Code"] in RETRYABLE_CALL_ERRORS
    assert seen == {("InternalFailure", 500), ("ServiceUnavailable", 503)}


def test_put_records_failures_come_inside_a_200_that_botocore_does_not_retry(faulty, arm):
    arm("put-throttle=1")
    kinesis = client("kinesis", faulty)
    reply = kinesis.put_records(
        StreamName=STREAM, Records=[{"Data": f"lost-{n}".encode(), "PartitionKey": "k"} for n in range(3)]
    )
    assert reply["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert (
        reply["ResponseMetadata"]["RetryAttempts"] == 0
    )  # a 200 is a success to botocore: callers must look
    assert reply["FailedRecordCount"] == 3
    assert {r["ErrorCode"] for r in reply["Records"]} == {"ProvisionedThroughputExceededException"}
    assert all("SequenceNumber" not in r for r in reply["Records"])
    assert RETRYABLE_ENTRY_ERRORS >= {r["ErrorCode"] for r in reply["Records"]}
    stop_faults(faulty)
    stored = kinesis.get_records(ShardIterator=iterator(kinesis), Limit=10_000)["Records"]
    assert [r["Data"] for r in stored if r["Data"].startswith(b"lost-")] == []


def test_s3_slow_down_is_parsed_and_retried_by_botocore(faulty, arm):
    arm("s3-503=1")
    s3 = client("s3", faulty)
    with pytest.raises(ClientError) as caught:
        s3.put_object(Bucket=BUCKET, Key="k", Body=b"x" * 200_000)
    response = caught.value.response
    assert (response["Error"]["Code"], response["Error"]["Message"]) == (
        "SlowDown",
        "Please reduce your request rate.",
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert response["ResponseMetadata"]["RetryAttempts"] == 2
    with pytest.raises(ClientError) as head:
        s3.head_object(Bucket=BUCKET, Key="k")
    # HEAD replies carry no body, so botocore names the error by its status, as it does on AWS.
    assert (
        head.value.response["Error"]["Code"],
        head.value.response["ResponseMetadata"]["HTTPStatusCode"],
    ) == (
        "503",
        503,
    )


def test_latency_is_added_and_counted_per_request(faulty, arm):
    arm("s3-latency=20ms,kinesis-latency=10ms")
    client("s3", faulty).list_objects_v2(Bucket=BUCKET)
    client("kinesis", faulty).list_shards(StreamName=STREAM)
    kinds = read_faults(faulty)["kinds"]
    assert kinds["s3-latency"] == {"injected": 1, "delay_ms": 20.0, "added_s": 0.02}
    assert kinds["kinesis-latency"] == {"injected": 1, "delay_ms": 10.0, "added_s": 0.01}


def test_local_up_arms_faults_and_status_json_counts_them(tmp_path):
    import subprocess
    import sys

    def lakestack(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lakestack", "local", "--state-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )

    port = free_port()
    up = lakestack("up", "--port", str(port), "--faults", "put-throttle=100%", "--faults-seed", "9")
    try:
        assert up.returncode == 0, up.stderr
        assert "faults  put-throttle=1 (seed 9)" in up.stdout
        state = json.loads(lakestack("status", "--json").stdout)
        kinesis = client("kinesis", state["endpoint_url"])
        reply = kinesis.put_records(
            StreamName=state["stream_name"], Records=[{"Data": b"x", "PartitionKey": "k"}] * 4
        )
        assert reply["FailedRecordCount"] == 4
        status = json.loads(lakestack("status", "--json").stdout)
        assert {k: status["faults"][k] for k in ("armed", "spec", "seed")} == {
            "armed": True,
            "spec": "put-throttle=1",
            "seed": 9,
        }
        assert status["faults"]["kinds"]["put-throttle"]["injected"] == 4
        assert (status["faults_seed"], status["faults"]["kinds"]["put-throttle"]["survived"]) == (9, 0)
        text = lakestack("status").stdout
        assert re.search(r"\n +put-throttle +4 injected of 4 entries; 0 survived\n", text), text
    finally:
        lakestack("down")
