"""A Kinesis client factory that injects real botocore throttling and expired-iterator errors.

Loaded by file path (``clientFactory="<dir>/flaky_kinesis.py:build"``) inside Spark's Python processes,
where a test cannot monkeypatch.
"""

from __future__ import annotations

import boto3
from botocore.exceptions import ClientError


def _error(code: str, status: int, operation: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"injected {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        operation,
    )


class FlakyKinesis:
    """Every 3rd GetRecords is throttled, every 4th says the iterator expired, every 5th GetShardIterator is throttled."""

    def __init__(self, real) -> None:
        self._real = real
        self._get_records = 0
        self._iterators = 0

    def __getattr__(self, name):
        return getattr(self._real, name)

    def get_records(self, **kwargs):
        self._get_records += 1
        if self._get_records % 3 == 0:
            raise _error("ProvisionedThroughputExceededException", 400, "GetRecords")
        if self._get_records % 4 == 0:
            raise _error("ExpiredIteratorException", 400, "GetRecords")
        return self._real.get_records(**kwargs)

    def get_shard_iterator(self, **kwargs):
        self._iterators += 1
        if self._iterators % 5 == 0:
            raise _error("ProvisionedThroughputExceededException", 400, "GetShardIterator")
        return self._real.get_shard_iterator(**kwargs)


def build(service: str, *, region: str, endpoint_url: str | None):
    return FlakyKinesis(boto3.client(service, region_name=region, endpoint_url=endpoint_url))


class TrimmedKinesis:
    """Pretends retention trimmed every shard up to sequence number 20 (moto never trims)."""

    TRIMMED_THROUGH = 20

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def describe_stream_summary(self, **kwargs):
        reply = self._real.describe_stream_summary(**kwargs)
        # Zero retention: every checkpointed position is old enough to be checked against the trim horizon.
        reply["StreamDescriptionSummary"]["RetentionPeriodHours"] = 0
        return reply

    def get_shard_iterator(self, **kwargs):
        if kwargs.get("ShardIteratorType") == "TRIM_HORIZON":
            kwargs = {
                **kwargs,
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": str(self.TRIMMED_THROUGH),
            }
        return self._real.get_shard_iterator(**kwargs)


def build_trimmed(service: str, *, region: str, endpoint_url: str | None):
    return TrimmedKinesis(boto3.client(service, region_name=region, endpoint_url=endpoint_url))


class ThrottledOnce:
    """Only the very first GetRecords call is throttled (one known fault, for exact counts)."""

    def __init__(self, real) -> None:
        self._real = real
        self._throttled = False

    def __getattr__(self, name):
        return getattr(self._real, name)

    def get_records(self, **kwargs):
        if not self._throttled:
            self._throttled = True
            raise _error("ProvisionedThroughputExceededException", 400, "GetRecords")
        return self._real.get_records(**kwargs)


def build_throttled_once(service: str, *, region: str, endpoint_url: str | None):
    return ThrottledOnce(boto3.client(service, region_name=region, endpoint_url=endpoint_url))


class NoGetRecords:
    """Credentials without kinesis:GetRecords: every GetRecords is refused as IAM refuses it."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def get_records(self, **kwargs):
        raise ClientError(
            {
                "Error": {
                    "Code": "AccessDeniedException",
                    "Message": "User: arn:aws:sts::123456789012:assumed-role/emr-ec2/i-0 is not authorized to "
                    "perform: kinesis:GetRecords because no identity-based policy allows the "
                    "kinesis:GetRecords action",
                },
                "ResponseMetadata": {"HTTPStatusCode": 400},
            },
            "GetRecords",
        )


def build_no_get_records(service: str, *, region: str, endpoint_url: str | None):
    return NoGetRecords(boto3.client(service, region_name=region, endpoint_url=endpoint_url))
