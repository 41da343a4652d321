"""The Kinesis source's cheap check before a query starts (see :func:`check_kinesis_stream`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from jobs._aws import make_client
from jobs._retry import Retrier, RetryPolicy
from jobs.sources._client import explain_access_error, is_throttled
from jobs.sources.errors import KinesisReadError, StreamAccessError

T = TypeVar("T")

# Only throttling is worth a retry here: a refused connection or a wrong name will not cure itself, and the
# user should hear about it at once.
_CHECK_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.2, max_delay_s=2.0)
_READABLE = frozenset({"ACTIVE", "UPDATING"})


def check_kinesis_stream(
    stream_name: str,
    *,
    region: str,
    endpoint_url: str | None = None,
    client_factory: str | None = None,
) -> int:
    """Check that the stream exists and that these credentials may read it; return its open shard count.

    Three calls, the ones the source's planner makes before any executor reads: DescribeStreamSummary,
    ListShards (one shard) and GetShardIterator at LATEST. Missing credentials, a wrong name or region, a
    missing describe/list/iterator permission and an emulator that is not running are reported in a second,
    before Spark starts. No GetRecords: the driver side of the job never reads records (the executors do,
    with their own credentials), so a missing kinesis:GetRecords or kms:Decrypt is reported by the first
    executor read, as one error naming the stream, the shard and the permission.

    Raises:
        StreamNotFoundError: no such stream in that region (exit 2).
        StreamAccessError: credentials, permissions, region or endpoint (exit 2).
        KinesisReadError: Kinesis kept throttling the check (exit 1).
    """
    client = make_client("kinesis", region=region, endpoint_url=endpoint_url, factory=client_factory)

    def give_up(error: BaseException, attempts: int) -> Exception:
        return KinesisReadError(
            f"checking Kinesis stream {stream_name!r} was throttled {attempts} times (last: {error}); "
            "retry the job in a minute."
        )

    retrier = Retrier(
        _CHECK_RETRY, retryable=is_throttled, give_up=give_up, throttled=is_throttled, rng=random.Random()
    )

    def call(action: Callable[[], T]) -> T:
        try:
            return retrier.call(action)
        except Exception as error:
            explain_access_error(error, stream=stream_name, region=region, endpoint_url=endpoint_url)
            raise

    summary: dict[str, Any] = call(lambda: client.describe_stream_summary(StreamName=stream_name))[
        "StreamDescriptionSummary"
    ]
    status = summary.get("StreamStatus", "ACTIVE")
    if status not in _READABLE:
        raise StreamAccessError(
            f"expected Kinesis stream {stream_name!r} in region {region!r} to be ACTIVE, found {status}. "
            + ("Wait until it is created." if status == "CREATING" else "Use another stream.")
        )
    shards = call(lambda: client.list_shards(StreamName=stream_name, MaxResults=1))["Shards"]
    if shards:
        shard_id = shards[0]["ShardId"]
        call(
            lambda: client.get_shard_iterator(
                StreamName=stream_name, ShardId=shard_id, ShardIteratorType="LATEST"
            )
        )
    return int(summary.get("OpenShardCount", len(shards)))
