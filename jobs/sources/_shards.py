"""Shard listing, lineage and the plain-Python shard reader (iterators, pacing, retries, expiry, data loss).

Everything here is Spark-free so it can be unit-tested with a fake client; the Spark reader in
``kinesis.py`` only wires it to offsets and partitions.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobs._aws import error_code, http_status
from jobs._retry import RetryPolicy
from jobs.errors import one_line
from jobs.sources._client import ACCESS_CODES, EXPIRED_CODES, CallStats, call_with_retry, epoch_micros
from jobs.sources._offsets import ShardInfo, ShardPosition, StartPosition
from jobs.sources.errors import DataLossError, KinesisReadError, StreamAccessError

log = logging.getLogger(__name__)

# Kinesis allows 5 GetRecords calls per second per shard (shared by all consumers of the shard).
MIN_SECONDS_BETWEEN_GET_RECORDS = 0.2
# ... and 2 MB/s of reads per shard: after a reply of n bytes the next call waits n / READ_BYTES_PER_SECOND.
READ_BYTES_PER_SECOND = 2 * 1024 * 1024
GET_RECORDS_MAX_LIMIT = 10_000
# A sparse shard can answer empty while records exist further on (MillisBehindLatest > 0); bound the walk.
MAX_EMPTY_POLLS_BEHIND = 20
# Probe the trim horizon only when the last record read is this close to expiring: it costs two calls.
EXPIRY_MARGIN_MS = 10 * 60 * 1000
MAX_ITERATOR_REFRESHES = 50


def refused(error: BaseException, *, stream: str, shard_id: str, action: str) -> None:
    """Raise :class:`StreamAccessError` when ``error`` says the credentials may not make ``action`` on the shard.

    The job's preflight runs on the driver and makes no GetRecords call, so a missing kinesis:GetRecords (or
    kms:Decrypt on an encrypted stream) first shows here, on an executor, whose credentials may also differ
    from the driver's (an EMR instance profile): the message names the stream, the shard and the permission.
    Any other error returns, for the caller to re-raise.
    """
    code = error_code(error)
    if code not in ACCESS_CODES:
        return
    if code.startswith("KMS"):
        need = "kms:Decrypt on the stream's KMS key (and the key enabled and usable)"
    elif code == "AccessDeniedException":
        need = f"kinesis:{action} on the stream"
    else:
        need = f"valid credentials with kinesis:{action} on the stream"
    raise StreamAccessError(
        f"could not read Kinesis stream {stream!r} shard {shard_id}: {action} was refused with {code} "
        f"({one_line(error)}). Expected the credentials the executors run with to allow {need}; grant it "
        "(on EMR to the cluster's EC2 instance profile role) and rerun the job."
    ) from error


def list_shards(
    client: Any, stream_name: str, call: Callable[[Callable[[], Any], str], Any]
) -> list[ShardInfo]:
    """All shards of the stream (open and closed within retention), paginated, sorted by id."""
    shards: list[ShardInfo] = []
    request: dict[str, str] = {"StreamName": stream_name}
    while True:
        response = call(functools.partial(client.list_shards, **request), "ListShards")
        for raw in response.get("Shards", []):
            parents = tuple(p for p in (raw.get("ParentShardId"), raw.get("AdjacentParentShardId")) if p)
            ending = raw.get("SequenceNumberRange", {}).get("EndingSequenceNumber")
            shards.append(ShardInfo(raw["ShardId"], parents, ending))
        token = response.get("NextToken")
        if not token:
            return sorted(shards, key=lambda s: s.shard_id)
        request = {"NextToken": token}


@dataclass
class ShardRead:
    """What one bounded read of a shard produced."""

    data: list[bytes] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    sequence_numbers: list[str] = field(default_factory=list)
    arrival_micros: list[int] = field(default_factory=list)  # epoch microseconds, UTC
    # Sum of every record's arrival (epoch microseconds), kept even when the payloads are dropped: the
    # records' mean arrival is how long a batch's records waited in the stream (jobs.stages).
    arrival_sum_us: int = 0
    nbytes: int = 0
    last_sequence: str | None = None
    last_arrival_ms: int | None = None
    finished: bool = False  # a closed shard read to its end
    millis_behind_latest: int | None = None
    lost: str | None = None  # description of a data-loss gap skipped with fail_on_data_loss=False
    stats: CallStats = field(default_factory=CallStats)
    inline: bool = True  # False once the payloads were dropped to bound memory
    limited: bool = False  # a record, byte or time limit ended the read before the shard's tip


class _Pacer:
    """Keeps GetRecords on one shard at most 5 calls/s and 2 MB/s within this process."""

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

    def charge(self, key: str, nbytes: int, bytes_per_second: float) -> None:
        """A reply of ``nbytes`` delays the shard's next call to keep its read rate under the quota."""
        extra = nbytes / bytes_per_second - MIN_SECONDS_BETWEEN_GET_RECORDS
        if extra > 0:
            with self._lock:
                self._last[key] = self._last.get(key, time.monotonic()) + extra


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

    def _iterator(self, shard_id: str, position: ShardPosition, stats: CallStats) -> str:
        kwargs: dict[str, Any] = {"StreamName": self._stream, "ShardId": shard_id}
        moment = position.start.at_timestamp_ms
        if position.sequence is not None:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=position.sequence)
        elif moment is not None:
            kwargs.update(
                ShardIteratorType="AT_TIMESTAMP",
                Timestamp=dt.datetime.fromtimestamp(moment / 1000, tz=dt.UTC),
            )
        else:
            kwargs.update(ShardIteratorType="TRIM_HORIZON")
        try:
            response = call_with_retry(
                lambda: self._client.get_shard_iterator(**kwargs),
                what=f"GetShardIterator on stream {self._stream!r} shard {shard_id}",
                policy=self._policy,
                stats=stats,
                rng=self._rng,
                sleep=self._sleep,
            )
        except Exception as error:
            refused(error, stream=self._stream, shard_id=shard_id, action="GetShardIterator")
            raise
        return str(response["ShardIterator"])

    @property
    def fail_on_data_loss(self) -> bool:
        return self._fail_on_data_loss

    def _check_expiry(
        self, shard_id: str, position: ShardPosition, result: ShardRead, *, report_gap: bool = False
    ) -> bool:
        """Return True when the position fell behind the trim horizon (and the loss was tolerated, or only
        described in ``result.lost`` for the caller to judge with ``report_gap``)."""
        seq, last_ms = position.sequence, position.last_arrival_ms
        if seq is None or last_ms is None:
            return False
        if self._now_ms() - int(last_ms) < self._retention_ms - EXPIRY_MARGIN_MS:
            return False
        iterator = self._iterator(shard_id, ShardPosition(), result.stats)
        try:
            response = call_with_retry(
                lambda: self._client.get_records(ShardIterator=iterator, Limit=1),
                what=f"GetRecords (trim-horizon probe) on stream {self._stream!r} shard {shard_id}",
                policy=self._policy,
                stats=result.stats,
                rng=self._rng,
                sleep=self._sleep,
            )
        except Exception as error:
            refused(error, stream=self._stream, shard_id=shard_id, action="GetRecords")
            raise
        records = response.get("Records", [])
        if not records or int(records[0]["SequenceNumber"]) <= int(seq):
            return False
        oldest = records[0]["SequenceNumber"]
        gap = (
            f"stream {self._stream!r} shard {shard_id}: records after sequence number {seq} (last read, "
            f"arrived {dt.datetime.fromtimestamp(int(last_ms) / 1000, tz=dt.UTC).isoformat()}) and before "
            f"{oldest} (oldest still retained) expired before they were read"
        )
        if report_gap:
            result.lost = gap
            return True
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
        position: ShardPosition,
        *,
        closed_end: str | None,
        max_records: int | None = None,
        until_sequence: str | None = None,
        max_bytes: int | None = None,
        deadline: float | None = None,
        report_gap: bool = False,
    ) -> ShardRead:
        """Read records after ``position``.

        Stops at ``max_records`` (planning) or once ``until_sequence`` is reached (replaying a planned
        range, inclusive), when caught up with the shard, or at the end of a closed shard. A closed shard
        is finished when GetRecords returns no next iterator (AWS), when its ``EndingSequenceNumber`` has
        been read (the emulator never returns a null iterator), or when it answers empty with
        ``MillisBehindLatest == 0``. ``max_bytes`` (payload bytes) and ``deadline`` (``time.monotonic()``)
        end a read too; ``limited`` on the result says a limit, not the tip, ended it. With ``report_gap`` a
        position behind the trim horizon is neither raised nor logged: the read starts at the horizon and
        ``lost`` describes the gap, for a caller that judges the loss itself (a replay of a recorded range).
        """
        walk = _ShardWalk(
            self,
            shard_id,
            closed_end=closed_end,
            max_records=max_records,
            until=int(until_sequence) if until_sequence is not None else None,
            max_bytes=max_bytes,
            deadline=deadline,
        )
        start = position
        if self._check_expiry(shard_id, position, walk.result, report_gap=report_gap):
            start = ShardPosition()
        walk.last_seq = position.sequence
        if not walk.already_there():
            walk.run(start)
        walk.result.last_sequence = walk.last_seq
        return walk.result


class _ShardWalk:
    """One :meth:`ShardReader.read`: the GetRecords loop and when it stops."""

    def __init__(
        self,
        reader: ShardReader,
        shard_id: str,
        *,
        closed_end: str | None,
        max_records: int | None,
        until: int | None,
        max_bytes: int | None = None,
        deadline: float | None = None,
    ) -> None:
        self.reader = reader
        self.shard_id = shard_id
        self.closed_end = closed_end
        self.max_records = max_records
        self.until = until
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.result = ShardRead()
        self.last_seq: str | None = None
        self.iterator: str | None = None
        self._resume_start = StartPosition()
        self._empty_behind = 0

    def already_there(self) -> bool:
        """True when the position is already at the replay's end or a closed shard's end."""
        last = self.last_seq
        if last is None:
            return False
        if self.until is not None and int(last) >= self.until:
            return True
        if self.closed_end is not None and int(last) >= int(self.closed_end):
            self.result.finished = True
            return True
        return False

    def run(self, start: ShardPosition) -> None:
        self._resume_start = start.start
        self.iterator = self.reader._iterator(self.shard_id, start, self.result.stats)
        while self.iterator is not None and not self._full():
            response = self._get_records()
            if response is None:
                continue  # the iterator expired and was refreshed
            if self._take(response):
                break
        if self._full() and not self.result.finished and self.until is None:
            # Stopped by a limit, whatever the shard said of its tip: the next batch reads on at once.
            self.result.limited = True

    def _full(self) -> bool:
        result = self.result
        return (
            (self.max_records is not None and len(result.sequence_numbers) >= self.max_records)
            or (self.max_bytes is not None and result.nbytes >= self.max_bytes)
            or (self.deadline is not None and time.monotonic() >= self.deadline)
        )

    def _limit(self) -> int:
        if self.max_records is None:
            return GET_RECORDS_MAX_LIMIT
        return min(GET_RECORDS_MAX_LIMIT, self.max_records - len(self.result.sequence_numbers))

    def _refresh(self, error: BaseException) -> None:
        # AWS says ExpiredIteratorException; the emulator answers any bad iterator with HTTP 500.
        if error_code(error) in EXPIRED_CODES or (http_status(error) or 0) >= 500:
            resume = ShardPosition(self._resume_start, self.last_seq)
            self.result.stats.iterator_refreshes += 1
            self.iterator = self.reader._iterator(self.shard_id, resume, self.result.stats)

    def _get_records(self) -> dict[str, Any] | None:
        reader, iterator, limit = self.reader, self.iterator, self._limit()
        key = f"{reader._stream}/{self.shard_id}"
        _PACER.wait(key, reader._sleep)
        try:
            response: dict[str, Any] = call_with_retry(
                lambda: reader._client.get_records(ShardIterator=iterator, Limit=limit),
                what=f"GetRecords on stream {reader._stream!r} shard {self.shard_id}",
                policy=reader._policy,
                stats=self.result.stats,
                rng=reader._rng,
                sleep=reader._sleep,
                on_retry=self._refresh,
            )
        except Exception as error:
            if error_code(error) not in EXPIRED_CODES:
                refused(error, stream=reader._stream, shard_id=self.shard_id, action="GetRecords")
                raise
            if self.result.stats.iterator_refreshes >= MAX_ITERATOR_REFRESHES:
                raise KinesisReadError(
                    f"shard iterators for stream {reader._stream!r} shard {self.shard_id} kept expiring "
                    f"({MAX_ITERATOR_REFRESHES} refreshes in one read). Expected a fresh iterator to "
                    "work; check the clock and the network latency to Kinesis."
                ) from error
            self._refresh(error)
            return None
        _PACER.charge(key, sum(len(r["Data"]) for r in response.get("Records", [])), READ_BYTES_PER_SECOND)
        return response

    def _keep(self, records: list[dict[str, Any]]) -> bool:
        """Append the records up to the replay's end; True once that end was reached."""
        result, until = self.result, self.until
        for record in records:
            seq = record["SequenceNumber"]
            if until is not None and int(seq) > until:
                return True
            if self.max_bytes is not None and result.sequence_numbers and result.nbytes >= self.max_bytes:
                # The rest of this reply is the next batch's (a limit, not the tip, ended this read).
                result.limited = True
                return True
            payload = record["Data"]
            arrival = epoch_micros(record["ApproximateArrivalTimestamp"])
            result.nbytes += len(payload)
            result.arrival_sum_us += arrival
            if result.inline:
                result.data.append(payload)
                result.partition_keys.append(record["PartitionKey"])
                result.arrival_micros.append(arrival)
            result.sequence_numbers.append(seq)
            self.last_seq = seq
            result.last_arrival_ms = arrival // 1000
            if until is not None and int(seq) == until:
                return True
        return False

    def _take(self, response: dict[str, Any]) -> bool:
        """Keep one reply's records; True when the walk is over."""
        result = self.result
        records = response.get("Records", [])
        behind = response.get("MillisBehindLatest")
        result.millis_behind_latest = behind
        self.iterator = response.get("NextShardIterator")
        reached_until = self._keep(records)
        if reached_until:
            return True
        if (
            self.closed_end is not None
            and self.last_seq is not None
            and int(self.last_seq) >= int(self.closed_end)
        ):
            result.finished = True
            return True
        if self.iterator is None:
            # Only a closed shard read to its end has no next iterator.
            result.finished = True
            return True
        if not records:
            if not behind:
                result.finished = self.closed_end is not None and self.until is None
                return True
            self._empty_behind += 1
            return self._empty_behind >= MAX_EMPTY_POLLS_BEHIND
        self._empty_behind = 0
        # At the tip as of this call: a planned batch covers what was there when it was planned. Chasing
        # records that keep arriving would hold the batch (and its latency) until the cap.
        return behind == 0 and self.until is None
