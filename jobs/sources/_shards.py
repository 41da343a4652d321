"""Shard listing, lineage and the plain-Python shard reader (iterators, pacing, retries, expiry, data loss).

Everything here is Spark-free so it can be unit-tested with a fake client; the Spark reader in
``kinesis.py`` only wires it to offsets and partitions.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobs.sources._client import (
    EXPIRED_CODES,
    CallStats,
    RetryPolicy,
    call_with_retry,
    client_error_code,
    epoch_micros,
    http_status,
)
from jobs.sources.errors import DataLossError, KinesisReadError

log = logging.getLogger("lakestack.sources.kinesis")

# Kinesis allows 5 GetRecords calls per second per shard (shared by all consumers of the shard).
MIN_SECONDS_BETWEEN_GET_RECORDS = 0.2
GET_RECORDS_MAX_LIMIT = 10_000
# A sparse shard can answer empty while records exist further on (MillisBehindLatest > 0); bound the walk.
MAX_EMPTY_POLLS_BEHIND = 20
# Probe the trim horizon only when the last record read is this close to expiring: it costs two calls.
EXPIRY_MARGIN_MS = 10 * 60 * 1000
MAX_ITERATOR_REFRESHES = 50


@dataclass(frozen=True)
class ShardInfo:
    """One shard as ListShards reports it."""

    shard_id: str
    parents: tuple[str, ...]
    ending_sequence: str | None  # None while the shard is open


def list_shards(
    client: Any, stream_name: str, call: Callable[[Callable[[], Any], str], Any]
) -> list[ShardInfo]:
    """All shards of the stream (open and closed within retention), paginated, sorted by id."""
    shards: list[ShardInfo] = []
    token: str | None = None
    while True:
        if token:
            response = call(lambda t=token: client.list_shards(NextToken=t), "ListShards")
        else:
            response = call(lambda: client.list_shards(StreamName=stream_name), "ListShards")
        for raw in response.get("Shards", []):
            parents = tuple(p for p in (raw.get("ParentShardId"), raw.get("AdjacentParentShardId")) if p)
            ending = raw.get("SequenceNumberRange", {}).get("EndingSequenceNumber")
            shards.append(ShardInfo(raw["ShardId"], parents, ending))
        token = response.get("NextToken")
        if not token:
            return sorted(shards, key=lambda s: s.shard_id)


@dataclass
class ShardRead:
    """What one bounded read of a shard produced."""

    data: list[bytes] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    sequence_numbers: list[str] = field(default_factory=list)
    arrival_micros: list[int] = field(default_factory=list)  # epoch microseconds, UTC
    nbytes: int = 0
    last_sequence: str | None = None
    last_arrival_ms: int | None = None
    finished: bool = False  # a closed shard read to its end
    millis_behind_latest: int | None = None
    lost: str | None = None  # description of a data-loss gap skipped with fail_on_data_loss=False
    stats: CallStats = field(default_factory=CallStats)
    inline: bool = True  # False once the payloads were dropped to bound memory


class _Pacer:
    """Keeps GetRecords on one shard at most 5 calls/s within this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def wait(self, key: str, sleep: Callable[[float], None]) -> None:
        with self._lock:
            now = time.monotonic()
            ready = self._last.get(key, 0.0) + MIN_SECONDS_BETWEEN_GET_RECORDS
            self._last[key] = max(now, ready)
        if ready > now:
            sleep(ready - now)


_PACER = _Pacer()


class ShardReader:
    """Reads one shard from a position, bounded by a record cap or an end sequence number.

    Args:
        client: a boto3 Kinesis client (or anything with the same three methods).
        stream_name: the stream.
        policy: retry policy for throttling and transient errors.
        fail_on_data_loss: raise :class:`DataLossError` on an expired gap instead of logging it.
        retention_ms: the stream's retention, to decide when the trim horizon must be probed.
        sleep: injectable for tests.
        now_ms: injectable clock (epoch milliseconds) for tests.
    """

    def __init__(
        self,
        client: Any,
        stream_name: str,
        *,
        policy: RetryPolicy | None = None,
        fail_on_data_loss: bool = True,
        retention_ms: int = 24 * 3600 * 1000,
        sleep: Callable[[float], None] = time.sleep,
        now_ms: Callable[[], int] | None = None,
        seed: int | None = None,
    ) -> None:
        self._client = client
        self._stream = stream_name
        self._policy = policy or RetryPolicy()
        self._fail_on_data_loss = fail_on_data_loss
        self._retention_ms = retention_ms
        self._sleep = sleep
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._rng = random.Random(seed)

    def _iterator(self, shard_id: str, position: dict[str, Any], stats: CallStats) -> str:
        kwargs: dict[str, Any] = {"StreamName": self._stream, "ShardId": shard_id}
        seq = position.get("seq")
        start = position.get("from", "TRIM_HORIZON")
        if seq is not None:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=seq)
        elif start.startswith("AT_TIMESTAMP:"):
            millis = int(start.split(":", 1)[1])
            kwargs.update(
                ShardIteratorType="AT_TIMESTAMP",
                Timestamp=dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC),
            )
        else:
            kwargs.update(ShardIteratorType="TRIM_HORIZON")
        response = call_with_retry(
            lambda: self._client.get_shard_iterator(**kwargs),
            what=f"GetShardIterator on stream {self._stream!r} shard {shard_id}",
            policy=self._policy,
            stats=stats,
            rng=self._rng,
            sleep=self._sleep,
        )
        return response["ShardIterator"]

    def _check_expiry(self, shard_id: str, position: dict[str, Any], result: ShardRead) -> bool:
        """Return True when the position fell behind the trim horizon (and the loss was tolerated)."""
        seq, last_ms = position.get("seq"), position.get("ts")
        if seq is None or last_ms is None:
            return False
        if self._now_ms() - int(last_ms) < self._retention_ms - EXPIRY_MARGIN_MS:
            return False
        iterator = self._iterator(shard_id, {"seq": None, "from": "TRIM_HORIZON"}, result.stats)
        response = call_with_retry(
            lambda: self._client.get_records(ShardIterator=iterator, Limit=1),
            what=f"GetRecords (trim-horizon probe) on stream {self._stream!r} shard {shard_id}",
            policy=self._policy,
            stats=result.stats,
            rng=self._rng,
            sleep=self._sleep,
        )
        records = response.get("Records", [])
        if not records or int(records[0]["SequenceNumber"]) <= int(seq):
            return False
        oldest = records[0]["SequenceNumber"]
        gap = (
            f"stream {self._stream!r} shard {shard_id}: records after sequence number {seq} (last read, "
            f"arrived {dt.datetime.fromtimestamp(int(last_ms) / 1000, tz=dt.UTC).isoformat()}) and before "
            f"{oldest} (oldest still retained) expired before they were read"
        )
        if self._fail_on_data_loss:
            raise DataLossError(
                f"data loss on {gap}. Expected the checkpointed position to be within the stream's "
                f"retention ({self._retention_ms // 3_600_000} h). Restart from a new checkpoint, raise the "
                "retention, or pass --fail-on-data-loss false to skip the gap (it is then logged and counted)."
            )
        log.warning("kinesis source skipping a data-loss gap: %s", gap)
        result.lost = gap
        return True

    def read(
        self,
        shard_id: str,
        position: dict[str, Any],
        *,
        closed_end: str | None,
        max_records: int | None = None,
        until_sequence: str | None = None,
        inline_bytes: int | None = None,
    ) -> ShardRead:
        """Read records after ``position``.

        Stops at ``max_records`` (planning) or once ``until_sequence`` is reached (replaying a planned
        range, inclusive), when caught up with the shard, or at the end of a closed shard. A closed shard
        is finished when GetRecords returns no next iterator (AWS), when its ``EndingSequenceNumber`` has
        been read (the emulator never returns a null iterator), or when it answers empty with
        ``MillisBehindLatest == 0``.
        """
        result = ShardRead()
        start = dict(position)
        if self._check_expiry(shard_id, position, result):
            start = {"seq": None, "from": "TRIM_HORIZON"}
        last_seq: str | None = position.get("seq")
        until = int(until_sequence) if until_sequence is not None else None
        if until is not None and last_seq is not None and int(last_seq) >= until:
            result.last_sequence = last_seq
            return result
        if closed_end is not None and last_seq is not None and int(last_seq) >= int(closed_end):
            result.finished = True
            result.last_sequence = last_seq
            return result
        iterator: str | None = self._iterator(shard_id, start, result.stats)
        empty_behind = 0

        def refresh(error: BaseException) -> None:
            nonlocal iterator
            # AWS says ExpiredIteratorException; the emulator answers any bad iterator with HTTP 500.
            if client_error_code(error) in EXPIRED_CODES or (http_status(error) or 0) >= 500:
                resume = {"seq": last_seq, "from": start.get("from")} if last_seq is not None else start
                result.stats.iterator_refreshes += 1
                iterator = self._iterator(shard_id, resume, result.stats)

        while iterator is not None:
            count = len(result.sequence_numbers)
            if max_records is not None and count >= max_records:
                break
            limit = (
                GET_RECORDS_MAX_LIMIT
                if max_records is None
                else min(GET_RECORDS_MAX_LIMIT, max_records - count)
            )
            _PACER.wait(f"{self._stream}/{shard_id}", self._sleep)
            try:
                response = call_with_retry(
                    lambda: self._client.get_records(ShardIterator=iterator, Limit=limit),
                    what=f"GetRecords on stream {self._stream!r} shard {shard_id}",
                    policy=self._policy,
                    stats=result.stats,
                    rng=self._rng,
                    sleep=self._sleep,
                    on_retry=refresh,
                )
            except Exception as error:
                if client_error_code(error) not in EXPIRED_CODES:
                    raise
                if result.stats.iterator_refreshes >= MAX_ITERATOR_REFRESHES:
                    raise KinesisReadError(
                        f"shard iterators for stream {self._stream!r} shard {shard_id} kept expiring "
                        f"({MAX_ITERATOR_REFRESHES} refreshes in one read). Expected a fresh iterator to "
                        "work; check the clock and the network latency to Kinesis."
                    ) from error
                refresh(error)
                continue
            records = response.get("Records", [])
            behind = response.get("MillisBehindLatest")
            result.millis_behind_latest = behind
            iterator = response.get("NextShardIterator")
            reached_until = False
            for record in records:
                seq = record["SequenceNumber"]
                if until is not None and int(seq) > until:
                    reached_until = True
                    break
                payload = record["Data"]
                arrival = epoch_micros(record["ApproximateArrivalTimestamp"])
                result.nbytes += len(payload)
                if result.inline:
                    result.data.append(payload)
                    result.partition_keys.append(record["PartitionKey"])
                    result.arrival_micros.append(arrival)
                result.sequence_numbers.append(seq)
                last_seq = seq
                result.last_arrival_ms = arrival // 1000
                if until is not None and int(seq) == until:
                    reached_until = True
                    break
            if result.inline and inline_bytes is not None and result.nbytes > inline_bytes:
                # Too big to ship inside the task: keep only positions, the executor re-reads the range.
                result.inline = False
                result.data, result.partition_keys, result.arrival_micros = [], [], []
            if reached_until:
                break
            if closed_end is not None and last_seq is not None and int(last_seq) >= int(closed_end):
                result.finished = True
                break
            if iterator is None:
                # Only a closed shard read to its end has no next iterator.
                result.finished = True
                break
            if not records:
                if not behind:
                    result.finished = closed_end is not None and until is None
                    break
                empty_behind += 1
                if empty_behind >= MAX_EMPTY_POLLS_BEHIND:
                    break
            else:
                empty_behind = 0
                if behind == 0 and until is None:
                    # At the tip as of this call: a planned batch covers what was there when it was planned.
                    # Chasing records that keep arriving would hold the batch (and its latency) until the cap.
                    break
        result.last_sequence = last_seq
        return result
