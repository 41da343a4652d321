"""Kinesis Data Streams source for Spark Structured Streaming, on Spark 4.0's Python Data Source API.

How a micro-batch is planned (``latestOffset``, in the driver-side Python process):
1. ListShards; shards new since the last batch are added (children of a reshard start at their
   beginning); a closed shard that was read to its end is marked done and never polled again.
2. A shard is eligible only once all of its parents are done as of the previous batch, so a child's
   records always land in a later micro-batch than its parents' (per-key order holds across reshards).
3. Each eligible shard is read from its position up to ``max_records_per_shard`` records. The offset is
   the last sequence number read per shard, so a batch range is exact and replayable.
The records read while planning travel inside the Spark task (Arrow IPC) instead of being read a second
time by the executor: Kinesis allows 5 reads/s and 2 MB/s per shard, shared by every consumer. A replay
after a restart (no prefetched data) or a range too large to ship re-reads the exact range on the executor.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from jobs._aws import make_client
from jobs._options import parse_bool
from jobs._retry import RetryPolicy
from jobs._store import CHECKPOINT_S3_ATTEMPTS
from jobs.checkpoint import DEFAULT_BATCHES_TO_RETAIN, BatchFiles, SourceRef, claim_checkpoint
from jobs.checkpoint import batches_to_retain as spark_batches_to_retain
from jobs.sources._checkpoint import last_logged_offset, metrics_files, pinned_start, read_metrics
from jobs.sources._client import CallStats, call_with_retry, explain_access_error
from jobs.sources._offsets import (
    ShardInfo,
    ShardPosition,
    StreamOffset,
    carried_forward,
    eligible_shards,
    lost_shards,
    parse_starting_position,
)
from jobs.sources._python_worker import keep_unchanged_zip_directories
from jobs.sources._shards import ShardRead, ShardReader, list_shards
from jobs.sources.errors import DataLossError, SourceSettingsError

log = logging.getLogger(__name__)

SCHEMA = StructType(
    [
        StructField("data", BinaryType(), False),
        StructField("partition_key", StringType(), False),
        StructField("shard_id", StringType(), False),
        StructField("sequence_number", StringType(), False),
        StructField("arrival_time", TimestampType(), False),
    ]
)
_ARROW_FIELDS: list[pa.Field[Any]] = [
    pa.field("data", pa.binary(), nullable=False),
    pa.field("partition_key", pa.string(), nullable=False),
    pa.field("shard_id", pa.string(), nullable=False),
    pa.field("sequence_number", pa.string(), nullable=False),
    pa.field("arrival_time", pa.timestamp("us", tz="UTC"), nullable=False),
]
_ARROW_SCHEMA = pa.schema(_ARROW_FIELDS)
# Ranges bigger than this are re-read by the executor instead of travelling inside the task
# (spark.rpc.message.maxSize is 128 MiB by default).
DEFAULT_INLINE_BYTES_PER_SHARD = 32 * 1024 * 1024
INLINE_BYTES_PER_BATCH = 256 * 1024 * 1024


@dataclass(frozen=True)
class KinesisSourceSettings:
    """Validated options of one Kinesis source."""

    stream_name: str
    region: str
    checkpoint_location: str
    start: str
    endpoint_url: str | None = None
    max_records_per_shard: int = 10_000
    fail_on_data_loss: bool = True
    client_factory: str | None = None
    max_attempts: int = 8
    inline_bytes_per_shard: int = DEFAULT_INLINE_BYTES_PER_SHARD
    batches_to_retain: int = DEFAULT_BATCHES_TO_RETAIN

    @classmethod
    def from_options(cls, options: dict[str, str]) -> KinesisSourceSettings:
        opts = {k.lower(): v for k, v in options.items()}
        missing = [k for k in ("streamname", "region", "checkpointlocation") if not opts.get(k)]
        if missing:
            raise SourceSettingsError(
                f"expected options streamName, region and checkpointLocation on the kinesis source; missing "
                f"{missing}. Use jobs.sources.read_kinesis_stream(...) which sets them."
            )
        try:
            cap = int(opts.get("maxrecordspershard", "10000"))
            attempts = int(opts.get("maxattempts", "8"))
            inline = int(opts.get("inlinebytespershard", str(DEFAULT_INLINE_BYTES_PER_SHARD)))
            retain = int(opts.get("batchestoretain", str(DEFAULT_BATCHES_TO_RETAIN)))
        except ValueError as error:
            raise SourceSettingsError(f"expected integer source options, {error}") from error
        if cap < 1:
            raise SourceSettingsError(f"expected --max-records-per-shard >= 1, found {cap}.")
        if attempts < 1:
            raise SourceSettingsError(f"expected maxAttempts >= 1, found {attempts}.")
        if retain < 1:
            raise SourceSettingsError(f"expected batchesToRetain >= 1, found {retain}.")
        return cls(
            stream_name=opts["streamname"],
            region=opts["region"],
            checkpoint_location=opts["checkpointlocation"],
            start=opts.get("start") or parse_starting_position(opts.get("startingposition", "trim-horizon")),
            endpoint_url=opts.get("endpointurl") or None,
            max_records_per_shard=cap,
            fail_on_data_loss=parse_bool(opts.get("failondataloss", "true"), name="failOnDataLoss"),
            client_factory=opts.get("clientfactory") or None,
            max_attempts=attempts,
            inline_bytes_per_shard=inline,
            batches_to_retain=retain,
        )


@dataclass(frozen=True)
class ShardRange:
    """One shard's range of one micro-batch: after ``start`` up to ``end_sequence`` inclusive.

    ``arrow`` holds the rows read while planning (Arrow IPC); None means the executor reads the range.
    """

    shard_id: str
    start: ShardPosition
    end_sequence: str
    arrow: bytes | None = None


class KinesisPartition(InputPartition):
    """The shard ranges one Spark task emits."""

    def __init__(self, ranges: list[ShardRange]) -> None:
        super().__init__([r.shard_id for r in ranges])
        self.ranges = ranges

    def __repr__(self) -> str:
        return (
            "KinesisPartition("
            + ", ".join(f"{r.shard_id}:{r.start.sequence}..{r.end_sequence}" for r in self.ranges)
            + ")"
        )


def pack_ranges(ranges: list[ShardRange], *, task_bytes: int) -> list[KinesisPartition]:
    """Prefetched ranges share tasks up to ``task_bytes`` (a task per shard costs more than the copy);
    ranges the executor must read from Kinesis get a task each, so shards are read in parallel."""
    packed: list[KinesisPartition] = []
    group: list[ShardRange] = []
    size = 0
    for shard_range in ranges:
        if shard_range.arrow is None:
            packed.append(KinesisPartition([shard_range]))
            continue
        if group and size + len(shard_range.arrow) > task_bytes:
            packed.append(KinesisPartition(group))
            group, size = [], 0
        group.append(shard_range)
        size += len(shard_range.arrow)
    if group:
        packed.append(KinesisPartition(group))
    return packed


def _to_arrow(shard_id: str, read: ShardRead) -> pa.RecordBatch:
    n = len(read.data)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(read.data, pa.binary()),
            pa.array(read.partition_keys, pa.string()),
            pa.array([shard_id] * n, pa.string()),
            pa.array(read.sequence_numbers, pa.string()),
            pa.array(read.arrival_micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=_ARROW_SCHEMA,
    )


def _merge(first: ShardRead, more: ShardRead) -> ShardRead:
    inline = first.inline and more.inline
    first.stats.add(more.stats)
    return ShardRead(
        data=first.data + more.data if inline else [],
        partition_keys=first.partition_keys + more.partition_keys if inline else [],
        sequence_numbers=first.sequence_numbers + more.sequence_numbers,
        arrival_micros=first.arrival_micros + more.arrival_micros if inline else [],
        arrival_sum_us=first.arrival_sum_us + more.arrival_sum_us,
        nbytes=first.nbytes + more.nbytes,
        last_sequence=more.last_sequence or first.last_sequence,
        last_arrival_ms=more.last_arrival_ms or first.last_arrival_ms,
        finished=more.finished,
        millis_behind_latest=more.millis_behind_latest,
        lost=more.lost,
        stats=first.stats,
        inline=inline,
    )


def _ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    # lz4 keeps tasks small (payloads are often JSON) for little CPU.
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


# What a read-ahead was started from: a plan uses it only when a shard's position is the same.
_ReadAheadKey = tuple[str, ShardPosition]
# What a planned range's rows are kept under until partitions() ships them: shard, after, up to.
_RangeKey = tuple[str, str | None, str]


@dataclass
class _Plan:
    """One planning round: the shards, where each stands and what was read for it."""

    listed: dict[str, ShardInfo]
    positions: dict[str, ShardPosition]
    eligible: list[ShardInfo]
    lost: list[str]
    list_stats: CallStats
    retention_ms: int
    reads: dict[str, ShardRead] = field(default_factory=dict)


class KinesisStreamReader(DataSourceStreamReader):
    """Plans capped micro-batches over a stream's shards; see the module docstring."""

    def __init__(self, settings: KinesisSourceSettings) -> None:
        self._settings = settings
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.RLock()
        self._client: Any = None
        self._s3_client: Any = None
        self._metrics_files: BatchFiles | None = None
        self._position: StreamOffset | None = None
        self._next_batch = 0
        # Call counts of plans that found nothing new since the last batch, carried into the next one.
        self._carried: dict[str, Any] | None = None
        self._initial_offset: StreamOffset | None = None
        self._pool: ThreadPoolExecutor | None = None
        # Rows of planned ranges, waiting for partitions() to put them inside the tasks.
        self._planned_rows: dict[_RangeKey, bytes] = {}
        # Reads of the next batch started while Spark runs this one, by the position they start from.
        self._read_ahead: dict[_ReadAheadKey, Future[ShardRead]] = {}

    # The reader is pickled to executors for read(): ship settings only, never clients or prefetched rows.
    def __getstate__(self) -> dict[str, Any]:
        return {"_settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._settings = state["_settings"]
        self._reset()

    def _kinesis(self) -> Any:
        if self._client is None:
            s = self._settings
            self._client = make_client(
                "kinesis",
                region=s.region,
                endpoint_url=s.endpoint_url,
                factory=s.client_factory,
                raw_timestamps=True,
            )
        return self._client

    def _s3(self) -> Any:
        # Built once: a fresh botocore session per metrics write would load the S3 model every batch.
        if self._s3_client is None:
            s = self._settings
            self._s3_client = make_client(
                "s3", region=s.region, endpoint_url=s.endpoint_url, attempts=CHECKPOINT_S3_ATTEMPTS
            )
        return self._s3_client

    def _shard_reader(self, *, retention_ms: int = 24 * 3600 * 1000) -> ShardReader:
        s = self._settings
        return ShardReader(
            self._kinesis(),
            s.stream_name,
            policy=RetryPolicy(max_attempts=s.max_attempts),
            fail_on_data_loss=s.fail_on_data_loss,
            retention_ms=retention_ms,
        )

    def _call(self, fn: Any, what: str, stats: CallStats | None = None) -> Any:
        s = self._settings
        try:
            return call_with_retry(
                fn,
                what=f"{what} on stream {s.stream_name!r}",
                policy=RetryPolicy(max_attempts=s.max_attempts),
                stats=stats if stats is not None else CallStats(),
                rng=random.Random(),
            )
        except Exception as error:
            explain_access_error(error, stream=s.stream_name, region=s.region, endpoint_url=s.endpoint_url)
            raise

    def _restore(self) -> StreamOffset:
        if self._position is None:
            s = self._settings
            # The source claims its part of the checkpoint (a job adds its own and its target's) before it
            # reads a position from it: a checkpoint of another stream holds positions that mean nothing here.
            claim_checkpoint(
                s.checkpoint_location, source=SourceRef.kinesis(s.stream_name, s.region), s3_client=self._s3
            )
            logged = last_logged_offset(s.checkpoint_location, s.stream_name, self._s3)
            if logged is not None:
                self._next_batch = logged[0] + 1
                self._position = StreamOffset.from_json(logged[1])
            else:
                self._position = self._initial()
            # Counts an earlier run wrote for the batch it never got to plan (idle plans, or a plan whose
            # offset Spark never logged) still belong to that batch.
            earlier = read_metrics(s.checkpoint_location, self._s3, batch_id=self._next_batch)
            self._carried = earlier[0] if earlier else None
        return self._position

    def _initial(self) -> StreamOffset:
        if self._initial_offset is None:
            s = self._settings
            # The start spec is pinned next to the checkpoint the first time: "latest" means the moment the
            # query first ran, even when it stopped before its first batch and Spark logged no offset.
            start = ShardPosition.from_json({"from": pinned_start(s.checkpoint_location, s.start, self._s3)})
            shards = list_shards(self._kinesis(), s.stream_name, self._call)
            self._initial_offset = StreamOffset(s.stream_name, {info.shard_id: start for info in shards})
        return self._initial_offset

    def initialOffset(self) -> dict[str, Any]:
        with self._lock:
            return self._initial().to_json()

    def latestOffset(self) -> dict[str, Any]:
        with self._lock:
            start = self._restore()
            end, metrics = self._plan(start)
            if self._carried is not None:
                metrics = add_call_counts(metrics, self._carried)
            metrics["batch_id"] = self._next_batch
            if end != start:
                self._record_metrics(metrics)
                self._next_batch += 1
                self._carried = None
            elif _had_trouble(metrics):
                # A plan that found nothing new still made calls, and on a quiet stream most plans are such.
                # Its throttles and retries go into the next batch's metrics, and are written now under that
                # batch id so they are seen even if the query stops before that batch.
                metrics["idle_plans"] = metrics.get("idle_plans", 0) + 1
                self._carried = metrics
                self._metrics_store().write(self._next_batch, metrics)
            self._position = end
            return end.to_json()

    def _plan(self, start: StreamOffset) -> tuple[StreamOffset, dict[str, Any]]:
        """Plan the batch after ``start``: list, check lineage and loss, read each eligible shard."""
        begun = time.monotonic()
        started_at = time.time()
        plan = self._list(start)
        reader = self._shard_reader(retention_ms=plan.retention_ms)
        self._read_eligible(plan, reader)
        end = StreamOffset(self._settings.stream_name, self._advance(plan))
        self._start_read_ahead(reader, plan.listed, end.shards)
        metrics = self._metrics(plan, time.monotonic() - begun)
        # Wall-clock, to compare with the records' arrival times (jobs.stages: wait in the stream).
        metrics["plan_started_at"] = round(started_at, 4)
        records = metrics["records"]
        arrivals = sum(read.arrival_sum_us for read in plan.reads.values())
        metrics["mean_arrival_at"] = round(arrivals / records / 1e6, 4) if records else None
        return end, metrics

    def _list(self, start: StreamOffset) -> _Plan:
        """DescribeStreamSummary and ListShards; fails (or logs) on shards that expired unfinished."""
        s = self._settings
        client = self._kinesis()
        stats = CallStats()
        summary = self._call(
            lambda: client.describe_stream_summary(StreamName=s.stream_name), "DescribeStreamSummary", stats
        )
        retention_ms = int(summary["StreamDescriptionSummary"].get("RetentionPeriodHours", 24)) * 3_600_000
        shards = list_shards(client, s.stream_name, lambda fn, what: self._call(fn, what, stats))
        listed = {info.shard_id: info for info in shards}
        lost: list[str] = []
        for shard_id in lost_shards(start, listed):
            gap = (
                f"stream {s.stream_name!r} shard {shard_id} expired from the stream (no longer listed) before "
                f"it was read to its end; unread records after sequence number "
                f"{start.shards[shard_id].sequence} are lost"
            )
            if s.fail_on_data_loss:
                raise DataLossError(
                    f"data loss on {gap}. Restart from a new checkpoint or pass --fail-on-data-loss false."
                )
            log.warning("kinesis source: %s", gap)
            lost.append(gap)
        positions = carried_forward(start, listed)
        return _Plan(listed, positions, eligible_shards(listed, positions), lost, stats, retention_ms)

    def _read_eligible(self, plan: _Plan, reader: ShardReader) -> None:
        """Read every eligible shard up to the cap, starting from a matching read-ahead when there is one."""
        pool = self._executor()
        shards = len(plan.eligible)
        futures: dict[str, Future[ShardRead]] = {}
        for info in plan.eligible:
            position = plan.positions[info.shard_id]
            ahead = self._read_ahead.pop((info.shard_id, position), None)
            futures[info.shard_id] = ahead or pool.submit(self._read_shard, reader, info, position, shards)
        # Read-aheads of positions the plan moved away from (e.g. after a restart) are not worth waiting for.
        for stale in self._read_ahead.values():
            stale.cancel()
        self._read_ahead.clear()
        for info in plan.eligible:
            read = futures[info.shard_id].result()
            wanted = self._settings.max_records_per_shard - len(read.sequence_numbers)
            if wanted > 0 and not read.finished and read.lost is None:
                # The read-ahead may predate records that arrived since: top the batch up to the cap.
                more = reader.read(
                    info.shard_id,
                    plan.positions[info.shard_id].after(read.last_sequence, read.last_arrival_ms),
                    closed_end=info.ending_sequence,
                    max_records=wanted,
                    inline_bytes=self._inline_budget(shards) - read.nbytes,
                )
                read = _merge(read, more)
            plan.reads[info.shard_id] = read

    def _advance(self, plan: _Plan) -> dict[str, ShardPosition]:
        """The end positions; the rows read inline wait in ``_planned_rows`` for :meth:`partitions`."""
        positions = dict(plan.positions)
        for shard_id, read in plan.reads.items():
            position = positions[shard_id]
            if read.sequence_numbers and read.inline and read.last_sequence is not None:
                key = (shard_id, position.sequence, read.last_sequence)
                self._planned_rows[key] = _ipc_bytes(_to_arrow(shard_id, read))
            if read.sequence_numbers:
                position = position.after(read.last_sequence, read.last_arrival_ms)
            if read.finished:
                position = replace(position, done=True)
            if read.lost:
                plan.lost.append(read.lost)
            positions[shard_id] = position
        return positions

    def _metrics(self, plan: _Plan, seconds: float) -> dict[str, Any]:
        shard_metrics = {
            shard_id: {
                "records": len(read.sequence_numbers),
                "bytes": read.nbytes,
                "millis_behind_latest": read.millis_behind_latest,
                "throttled": read.stats.throttled,
                "retries": read.stats.retries,
                "iterator_refreshes": read.stats.iterator_refreshes,
                "finished": read.finished,
            }
            for shard_id, read in plan.reads.items()
        }
        listing = plan.list_stats
        return {
            "stream": self._settings.stream_name,
            "records": sum(m["records"] for m in shard_metrics.values()),
            "bytes": sum(m["bytes"] for m in shard_metrics.values()),
            "throttled": sum(m["throttled"] for m in shard_metrics.values()),
            "retries": sum(m["retries"] for m in shard_metrics.values()),
            "data_loss_events": len(plan.lost),
            "data_loss": plan.lost,
            "planning_seconds": round(seconds, 3),
            "listing": {"calls": listing.calls, "throttled": listing.throttled, "retries": listing.retries},
            "shards": shard_metrics,
        }

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kinesis-read")
        return self._pool

    def _start_read_ahead(
        self, reader: ShardReader, listed: dict[str, ShardInfo], positions: Mapping[str, ShardPosition]
    ) -> None:
        """Start reading the next batch while Spark runs this one: hides a batch's fixed cost behind I/O.

        The read-ahead starts at the end just planned; the next plan uses it only when its start matches.
        """
        pool = self._executor()
        ready = eligible_shards(listed, positions)
        for info in ready:
            position = positions[info.shard_id]
            self._read_ahead[(info.shard_id, position)] = pool.submit(
                self._read_shard, reader, info, position, len(ready)
            )

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _inline_budget(self, shards: int) -> int:
        # Bounded per batch as well as per shard: a stream with hundreds of shards must not pin GBs here.
        return min(self._settings.inline_bytes_per_shard, INLINE_BYTES_PER_BATCH // max(1, shards))

    def _read_shard(
        self, reader: ShardReader, info: ShardInfo, position: ShardPosition, shards: int
    ) -> ShardRead:
        return reader.read(
            info.shard_id,
            position,
            closed_end=info.ending_sequence,
            max_records=self._settings.max_records_per_shard,
            inline_bytes=self._inline_budget(shards),
        )

    def _record_metrics(self, metrics: dict[str, Any]) -> None:
        behind = {k: v["millis_behind_latest"] for k, v in metrics["shards"].items()}
        log.info(
            "kinesis batch %s stream=%s records=%s bytes=%s throttled=%s retries=%s data_loss=%s behind_ms=%s",
            metrics["batch_id"],
            metrics["stream"],
            metrics["records"],
            metrics["bytes"],
            metrics["throttled"],
            metrics["retries"],
            metrics["data_loss_events"],
            behind,
        )
        self._metrics_store().write(metrics["batch_id"], metrics)

    def _metrics_store(self) -> BatchFiles:
        # Older batches' files go as a new one is written: the folder stays at batches_to_retain files.
        if self._metrics_files is None:
            s = self._settings
            self._metrics_files = metrics_files(s.checkpoint_location, self._s3, retain=s.batches_to_retain)
        return self._metrics_files

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KinesisPartition]:
        with self._lock:
            before = StreamOffset.from_json({"stream": self._settings.stream_name, **start})
            after = StreamOffset.from_json(end)
            ranges: list[ShardRange] = []
            for shard_id, position in after.shards.items():
                first = before.position(shard_id)
                if position.sequence is None or position.sequence == first.sequence:
                    continue
                rows = self._planned_rows.pop((shard_id, first.sequence, position.sequence), None)
                ranges.append(ShardRange(shard_id, first, position.sequence, rows))
            # Whatever was not claimed belongs to a plan Spark dropped; never let it grow.
            self._planned_rows.clear()
            return pack_ranges(ranges, task_bytes=self._settings.inline_bytes_per_shard)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        keep_unchanged_zip_directories()  # once per worker: every later task skips re-reading pyspark.zip
        assert isinstance(partition, KinesisPartition)
        for shard_range in partition.ranges:
            yield from self._read_range(shard_range)

    def _read_range(self, shard_range: ShardRange) -> Iterator[pa.RecordBatch]:
        if shard_range.arrow is not None:
            yield from pa.ipc.open_stream(shard_range.arrow)
            return
        # A replayed batch (restart) or a range too big to ship: read exactly the planned range again.
        read = self._shard_reader().read(
            shard_range.shard_id, shard_range.start, closed_end=None, until_sequence=shard_range.end_sequence
        )
        if read.last_sequence is None or int(read.last_sequence) < int(shard_range.end_sequence):
            raise DataLossError(
                f"expected to re-read stream {self._settings.stream_name!r} shard {shard_range.shard_id} up "
                f"to sequence number {shard_range.end_sequence}, but the shard ended at {read.last_sequence}: "
                "the planned records expired before this replay. Restart from a new checkpoint."
            )
        yield _to_arrow(shard_range.shard_id, read)

    def commit(self, end: dict[str, Any]) -> None:
        return None


_CALL_COUNTS = ("throttled", "retries", "iterator_refreshes")


def _had_trouble(metrics: Mapping[str, Any]) -> bool:
    listing = metrics.get("listing", {})
    shards = metrics.get("shards", {}).values()
    return bool(
        listing.get("throttled")
        or listing.get("retries")
        or any(shard.get(count) for shard in shards for count in _CALL_COUNTS)
    )


def add_call_counts(metrics: Mapping[str, Any], earlier: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` of one plan with the call counts of ``earlier`` plans added (throttled calls, retries,
    iterator refreshes, listing calls); records, bytes and positions stay this plan's own."""
    shards = {shard_id: dict(counts) for shard_id, counts in metrics.get("shards", {}).items()}
    for shard_id, counts in earlier.get("shards", {}).items():
        into = shards.setdefault(
            shard_id,
            {
                "records": 0,
                "bytes": 0,
                "millis_behind_latest": counts.get("millis_behind_latest"),
                "finished": bool(counts.get("finished")),
            },
        )
        for name in _CALL_COUNTS:
            into[name] = int(into.get(name, 0)) + int(counts.get(name, 0))
    listing, before = dict(metrics.get("listing", {})), earlier.get("listing", {})
    for name in ("calls", "throttled", "retries"):
        listing[name] = int(listing.get(name, 0)) + int(before.get(name, 0))
    return {
        **metrics,
        "throttled": sum(int(shard.get("throttled", 0)) for shard in shards.values()),
        "retries": sum(int(shard.get("retries", 0)) for shard in shards.values()),
        "listing": listing,
        "shards": shards,
        "idle_plans": int(earlier.get("idle_plans", 0)),
    }


class KinesisDataSource(DataSource):
    """``spark.readStream.format("kinesis")``: options streamName, region, checkpointLocation, endpointUrl,
    startingPosition, maxRecordsPerShard, failOnDataLoss, clientFactory, batchesToRetain."""

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KinesisStreamReader(KinesisSourceSettings.from_options(dict(self.options)))


def read_kinesis_stream(  # noqa: PLR0913 -- keyword-only source options, as DataStreamReader takes them
    spark: SparkSession,
    *,
    stream_name: str,
    region: str,
    checkpoint_location: str,
    endpoint_url: str | None = None,
    starting_position: str = "trim-horizon",
    max_records_per_shard: int = 10_000,
    fail_on_data_loss: bool = True,
    client_factory: str | None = None,
    batches_to_retain: int | None = None,
) -> DataFrame:
    """Register the Kinesis source and return a streaming DataFrame over one stream.

    Args:
        spark: the session.
        stream_name: Kinesis stream name.
        region: AWS region of the stream (credentials come from boto3's default chain).
        checkpoint_location: the SAME checkpoint the query writes with: the reader finds its position in
            Spark's offset log there and writes per-batch metrics under ``sources/kinesis/metrics/``.
        endpoint_url: emulator endpoint (moto); None on AWS.
        starting_position: ``trim-horizon`` | ``latest`` | ``at-timestamp=<ISO-8601>``; used by a new query only.
        max_records_per_shard: cap of records per shard per micro-batch.
        fail_on_data_loss: fail when unread records expired; False logs and counts them in the metrics.
        client_factory: optional ``"module:callable"`` building the boto3 client (fault injection, tests).
        batches_to_retain: per-batch metrics files kept under the checkpoint; None keeps as many as Spark
            keeps of its own logs (``spark.sql.streaming.minBatchesToRetain``, 100 by default).

    Returns:
        A streaming DataFrame with columns data, partition_key, shard_id, sequence_number, arrival_time.

    Raises:
        SourceSettingsError: an option is invalid.
    """
    start = parse_starting_position(starting_position)
    if max_records_per_shard < 1:
        raise SourceSettingsError(f"expected --max-records-per-shard >= 1, found {max_records_per_shard}.")
    retain = batches_to_retain if batches_to_retain is not None else spark_batches_to_retain(spark)
    if retain < 1:
        raise SourceSettingsError(f"expected batches_to_retain >= 1, found {retain}.")
    spark.dataSource.register(KinesisDataSource)
    options = {
        "streamName": stream_name,
        "region": region,
        "checkpointLocation": checkpoint_location,
        "start": start,
        "maxRecordsPerShard": str(max_records_per_shard),
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        "batchesToRetain": str(retain),
    }
    if endpoint_url:
        options["endpointUrl"] = endpoint_url
    if client_factory:
        options["clientFactory"] = client_factory
    return spark.readStream.format("kinesis").options(**options).load()


def read_source_metrics(
    checkpoint_location: str,
    *,
    batch_id: int | None = None,
    region: str = "us-east-1",
    endpoint_url: str | None = None,
) -> list[dict[str, Any]]:
    """Per-micro-batch source metrics written next to the checkpoint, oldest first.

    Spark 4.0 gives Python sources no hook into ``query.lastProgress``, so each planned batch writes
    ``<checkpoint>/sources/kinesis/metrics/batch-<id>.json`` (records, bytes, throttled calls, retries,
    data-loss events and per shard ``millis_behind_latest``) and logs the same line. The file exists before
    the batch runs, so a ``foreachBatch`` writer can log ``read_source_metrics(cp, batch_id=batch_id)``.
    Only the newest batches' files are kept (``batches_to_retain`` of :func:`read_kinesis_stream`).

    Args:
        checkpoint_location: the query's checkpoint (local path or s3://).
        batch_id: only this micro-batch (a list of at most one entry).
        region: region of the checkpoint bucket (s3:// only).
        endpoint_url: emulator endpoint for an s3:// checkpoint.

    Returns:
        The kept batches' metrics, or with ``batch_id`` that batch's (empty when it was not planned yet).

    Raises:
        BatchNotKeptError: ``batch_id``'s metrics were removed by retention.
    """
    return read_metrics(
        checkpoint_location,
        lambda: make_client("s3", region=region, endpoint_url=endpoint_url, attempts=CHECKPOINT_S3_ATTEMPTS),
        batch_id=batch_id,
    )
