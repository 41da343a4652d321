"""Kinesis Data Streams source for Spark Structured Streaming, on Spark 4's Python Data Source API.

How a micro-batch is planned (``latestOffset``, in the driver-side Python process), with no GetRecords call:
1. ListShards; shards new since the last batch are added (children of a reshard start at their
   beginning); a closed shard that was read to its end is marked done and never polled again.
2. A shard is eligible only once all of its parents are done as of the previous batch, so a child's
   records always land in a later micro-batch than its parents' (per-key order holds across reshards).
3. The batch's offset is where every shard stands and which shards it reads
   (:class:`jobs.sources.kinesis_ranges.PlannedBatch`). Where each shard stands comes from the ranges the
   previous batch's tasks recorded.
Each eligible shard is one Spark task: the executor reads the shard from its position within the batch's
limits (records, bytes, seconds per shard), records the range it read in the checkpoint before it hands
rows to Spark, and a replay of the batch reads exactly that range (see :mod:`jobs.sources.kinesis_ranges`).
The driver's cost no longer grows with the stream's bytes: only executors touch records.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from jobs._aws import make_client
from jobs._options import parse_bool
from jobs._retry import RetryPolicy
from jobs._store import CHECKPOINT_S3_ATTEMPTS, CheckpointStore
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
from jobs.sources.kinesis_ranges import (
    Limits,
    PlannedBatch,
    RangeLog,
    RangeRecord,
    has_more,
    next_positions,
    quota_ready_at,
    read_task,
)

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
# One shard's task holds its range in memory until the range is recorded: bounded by these per batch.
DEFAULT_MAX_BYTES_PER_SHARD = 16 * 1024 * 1024
DEFAULT_READ_SECONDS_PER_SHARD = 10.0
# How often an idle stream is polled: a batch whose reads all reached the tip is followed by the next one
# only after this long (finding new records takes a batch, the planner never reads records).
DEFAULT_IDLE_POLL_MS = 500


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
    max_bytes_per_shard: int = DEFAULT_MAX_BYTES_PER_SHARD
    read_seconds_per_shard: float = DEFAULT_READ_SECONDS_PER_SHARD
    idle_poll_ms: int = DEFAULT_IDLE_POLL_MS
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
            max_bytes = int(opts.get("maxbytespershard", str(DEFAULT_MAX_BYTES_PER_SHARD)))
            seconds = float(opts.get("readsecondspershard", str(DEFAULT_READ_SECONDS_PER_SHARD)))
            idle = int(opts.get("idlepollms", str(DEFAULT_IDLE_POLL_MS)))
            retain = int(opts.get("batchestoretain", str(DEFAULT_BATCHES_TO_RETAIN)))
        except ValueError as error:
            raise SourceSettingsError(f"expected numeric source options, {error}") from error
        if cap < 1:
            raise SourceSettingsError(f"expected --max-records-per-shard >= 1, found {cap}.")
        if attempts < 1:
            raise SourceSettingsError(f"expected maxAttempts >= 1, found {attempts}.")
        if max_bytes < 1 or seconds <= 0 or idle < 0:
            raise SourceSettingsError(
                f"expected maxBytesPerShard >= 1, readSecondsPerShard > 0 and idlePollMs >= 0, found "
                f"{max_bytes}, {seconds} and {idle}."
            )
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
            max_bytes_per_shard=max_bytes,
            read_seconds_per_shard=seconds,
            idle_poll_ms=idle,
            batches_to_retain=retain,
        )

    @property
    def limits(self) -> Limits:
        return Limits(self.max_records_per_shard, self.max_bytes_per_shard, self.read_seconds_per_shard)


class ShardTask(InputPartition):
    """One shard's part of a planned batch: read on the executor from ``start``, recorded before use."""

    def __init__(
        self,
        batch: int,
        shard_id: str,
        start: ShardPosition,
        *,
        closed_end: str | None,
        retention_ms: int,
        not_before: float | None = None,
    ) -> None:
        super().__init__(shard_id)
        self.batch = batch
        self.shard_id = shard_id
        self.start = start
        self.closed_end = closed_end
        self.retention_ms = retention_ms
        self.not_before = not_before

    def __repr__(self) -> str:
        return f"ShardTask(batch {self.batch}, {self.shard_id} after {self.start.sequence})"


@dataclass(frozen=True)
class ShardRange:
    """A range of an offset logged before ranges were recorded: after ``start`` up to ``end_sequence``."""

    shard_id: str
    start: ShardPosition
    end_sequence: str


class KinesisPartition(InputPartition):
    """The replay of one shard's range of a batch whose offset holds its end (logged by an older version)."""

    def __init__(self, ranges: list[ShardRange]) -> None:
        super().__init__([r.shard_id for r in ranges])
        self.ranges = ranges

    def __repr__(self) -> str:
        return (
            "KinesisPartition("
            + ", ".join(f"{r.shard_id}:{r.start.sequence}..{r.end_sequence}" for r in self.ranges)
            + ")"
        )


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


# Clients built in this process (a Python worker serves many tasks): a fresh boto3 client per task costs
# more than a small batch's read.
_CLIENTS: dict[tuple[str, str, str | None, str | None], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _cached_client(service: str, settings: KinesisSourceSettings) -> Any:
    key = (service, settings.region, settings.endpoint_url, settings.client_factory)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            if service == "kinesis":
                _CLIENTS[key] = make_client(
                    "kinesis",
                    region=settings.region,
                    endpoint_url=settings.endpoint_url,
                    factory=settings.client_factory,
                    raw_timestamps=True,
                )
            else:
                _CLIENTS[key] = make_client(
                    "s3",
                    region=settings.region,
                    endpoint_url=settings.endpoint_url,
                    attempts=CHECKPOINT_S3_ATTEMPTS,
                )
        return _CLIENTS[key]


class KinesisStreamReader(DataSourceStreamReader):
    """Plans micro-batches over a stream's shards, read by the executors; see the module docstring."""

    def __init__(self, settings: KinesisSourceSettings) -> None:
        self._settings = settings
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.RLock()
        self._client: Any = None
        self._s3_client: Any = None
        self._metrics_files: BatchFiles | None = None
        self._range_log: RangeLog | None = None
        # The offset Spark logged last (or the one this reader returned last): a planned batch, or where
        # every shard stands (the initial offset, or an offset logged by an older version).
        self._last: dict[str, Any] | None = None
        self._next_batch = 0
        # Call counts of plans that found nothing new since the last batch, carried into the next one.
        self._carried: dict[str, Any] | None = None
        self._initial_offset: StreamOffset | None = None
        # When the last batch was found to have read up to every shard's tip (for the idle poll).
        self._idle_since: float | None = None
        # The batch this reader planned last (None until it planned one).
        self._planned_here: int | None = None
        # True until a fresh query's first latestOffset answered: Spark runs batch 0 on that answer whatever
        # it is, even the initial offset itself (an empty batch), so that answer takes a batch id.
        self._fresh = False

    # The reader is pickled to executors for read(): ship settings only, never clients.
    def __getstate__(self) -> dict[str, Any]:
        return {"_settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._settings = state["_settings"]
        self._reset()

    def _kinesis(self) -> Any:
        if self._client is None:
            self._client = _cached_client("kinesis", self._settings)
        return self._client

    def _s3(self) -> Any:
        # Built once: a fresh botocore session per metrics write would load the S3 model every batch.
        if self._s3_client is None:
            self._s3_client = _cached_client("s3", self._settings)
        return self._s3_client

    def _ranges(self) -> RangeLog:
        if self._range_log is None:
            s = self._settings
            self._range_log = RangeLog(
                CheckpointStore(s.checkpoint_location, self._s3), retain=s.batches_to_retain
            )
        return self._range_log

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

    def _restore(self) -> dict[str, Any]:
        if self._last is None:
            s = self._settings
            # The source claims its part of the checkpoint (a job adds its own and its target's) before it
            # reads a position from it: a checkpoint of another stream holds positions that mean nothing here.
            claim_checkpoint(
                s.checkpoint_location, source=SourceRef.kinesis(s.stream_name, s.region), s3_client=self._s3
            )
            logged = last_logged_offset(s.checkpoint_location, s.stream_name, self._s3)
            if logged is not None:
                self._next_batch = logged[0] + 1
                self._last = logged[1]
            else:
                self._last = self._initial().to_json()
                self._fresh = True
            # Counts an earlier run wrote for the batch it never got to plan (idle plans, or a plan whose
            # offset Spark never logged) still belong to that batch.
            earlier = read_metrics(s.checkpoint_location, self._s3, batch_id=self._next_batch)
            self._carried = earlier[0] if earlier else None
        return self._last

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
            last = self._restore()
            fresh, self._fresh = self._fresh, False
            begun, started_at = time.monotonic(), time.time()
            planned = PlannedBatch.from_json(last)
            if planned is None:
                positions, busy, records = StreamOffset.from_json(last).shards, True, None
            else:
                records = self._ranges().read_batch(planned)
                if records is None:
                    # The logged batch has not run yet (Spark replays it after a restart): nothing new.
                    return last
                positions, busy = next_positions(planned, records), has_more(records.values())
            plan = self._list(StreamOffset(self._settings.stream_name, positions))
            reads = {info.shard_id: info.ending_sequence for info in plan.eligible}
            if (
                planned is not None
                and records is not None
                and planned.batch == self._planned_here
                and not busy
                and set(reads) == set(planned.read)
                and not plan.lost
                and self._idle(records)
            ):
                self._carry(plan, started_at, time.monotonic() - begun)
                return last
            self._idle_since = None
            if not reads and not plan.lost:
                if fresh:
                    # Spark runs its batch 0 from the initial offset to this same offset (no rows): that
                    # batch id is taken, so the next planned batch carries Spark's id for it, 1.
                    self._empty_first_batch(plan, started_at, time.monotonic() - begun)
                else:
                    self._carry(plan, started_at, time.monotonic() - begun)
                return last
            # A shard read at its quota's pace in the last batch starts its next read when the pace allows.
            now = time.time()
            ready = {k: round(quota_ready_at(r), 3) for k, r in (records or {}).items() if k in reads}
            batch = PlannedBatch(
                StreamOffset(self._settings.stream_name, plan.positions),
                self._next_batch,
                reads,
                plan.retention_ms,
                {k: at for k, at in ready.items() if at > now},
            )
            metrics = self._planned_metrics(plan, batch, started_at, time.monotonic() - begun)
            if self._carried is not None:
                metrics = add_call_counts(metrics, self._carried)
            self._record_metrics(metrics)
            self._ranges().planned(batch)
            self._next_batch += 1
            self._carried = None
            self._planned_here = batch.batch
            self._last = batch.to_json()
            return self._last

    def _idle(self, records: Mapping[str, RangeRecord]) -> bool:
        """True while the next poll of a stream whose last batch read every shard to its tip must wait.

        After a batch that found records the next one starts ``idle_poll_ms`` after they were read; after
        one that found none, ``idle_poll_ms`` after that was seen, so a drain always sees a plan with nothing
        new (how Spark tells that a query has caught up). Only batches this reader planned wait: after a
        restart the stream is polled at once.
        """
        wait = self._settings.idle_poll_ms / 1000
        if any(r.records for r in records.values()):
            return time.time() - max(r.read_at for r in records.values()) < wait
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since < wait

    def _carry(self, plan: _Plan, started_at: float, seconds: float) -> None:
        """A plan that made no batch still made calls; its throttles and retries go to the next batch's
        metrics, written now under that batch id so they are seen even if the query stops before it."""
        if not (plan.list_stats.throttled or plan.list_stats.retries):
            return
        metrics = {
            **self._planned_metrics(plan, None, started_at, seconds),
            "batch_id": self._next_batch,
        }
        if self._carried is not None:
            metrics = add_call_counts(metrics, self._carried)
        metrics["idle_plans"] = metrics.get("idle_plans", 0) + 1
        self._carried = metrics
        self._metrics_store().write(self._next_batch, metrics)

    def _empty_first_batch(self, plan: _Plan, started_at: float, seconds: float) -> None:
        """A fresh query's first plan found no shard to read: Spark still runs batch 0 on it (start ==
        end), so its calls are that batch's metrics and the next plan is batch 1, numbered as Spark numbers
        it (the stage records join the source's metrics to Spark's batches by that id)."""
        metrics = self._planned_metrics(plan, None, started_at, seconds)
        if self._carried is not None:
            metrics = add_call_counts(metrics, self._carried)
        self._record_metrics(metrics)
        self._next_batch += 1
        self._carried = None

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

    def _planned_metrics(
        self, plan: _Plan, batch: PlannedBatch | None, started_at: float, seconds: float
    ) -> dict[str, Any]:
        """A batch's metrics as planned; the read numbers come from its ranges (:func:`with_ranges`)."""
        listing = plan.list_stats
        read = sorted(batch.read) if batch is not None else []
        return {
            "stream": self._settings.stream_name,
            "batch_id": batch.batch if batch is not None else self._next_batch,
            "records": 0,
            "bytes": 0,
            "throttled": 0,
            "retries": 0,
            "data_loss_events": len(plan.lost),
            "data_loss": list(plan.lost),
            "planning_seconds": round(seconds, 4),
            # Wall-clock, to compare with the records' arrival times (jobs.stages: wait in the stream).
            "plan_started_at": round(started_at, 4),
            "mean_arrival_at": None,
            "listing": {"calls": listing.calls, "throttled": listing.throttled, "retries": listing.retries},
            "read": read,
            "shards": {},
        }

    def _record_metrics(self, metrics: dict[str, Any]) -> None:
        log.info(
            "kinesis batch %s stream=%s planned shards=%s listing=%s planning_s=%s",
            metrics["batch_id"],
            metrics["stream"],
            len(metrics["read"]),
            metrics["listing"],
            metrics["planning_seconds"],
        )
        self._metrics_store().write(metrics["batch_id"], metrics)

    def _metrics_store(self) -> BatchFiles:
        # Older batches' files go as a new one is written: the folder stays at batches_to_retain files.
        if self._metrics_files is None:
            s = self._settings
            self._metrics_files = metrics_files(s.checkpoint_location, self._s3, retain=s.batches_to_retain)
        return self._metrics_files

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        with self._lock:
            planned = PlannedBatch.from_json(end)
            if planned is not None:
                return [
                    ShardTask(
                        planned.batch,
                        shard_id,
                        planned.offset.position(shard_id),
                        closed_end=planned.read[shard_id],
                        retention_ms=planned.retention_ms,
                        not_before=planned.not_before.get(shard_id),
                    )
                    for shard_id in sorted(planned.read)
                ]
            # An offset logged by an older version holds each shard's end: re-read exactly those ranges.
            before = StreamOffset.from_json({"stream": self._settings.stream_name, **start})
            after = StreamOffset.from_json(end)
            ranges: list[InputPartition] = []
            for shard_id, position in after.shards.items():
                first = before.position(shard_id)
                if position.sequence is None or position.sequence == first.sequence:
                    continue
                ranges.append(KinesisPartition([ShardRange(shard_id, first, position.sequence)]))
            return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        keep_unchanged_zip_directories()  # once per worker: every later task skips re-reading pyspark.zip
        if isinstance(partition, ShardTask):
            s = self._settings
            if partition.not_before is not None:
                # The shard's read quota (2 MB/s) as the last batch left it; never more than a batch's read.
                time.sleep(min(s.read_seconds_per_shard, max(0.0, partition.not_before - time.time())))
            read = read_task(
                self._shard_reader(retention_ms=partition.retention_ms),
                self._ranges(),
                s.stream_name,
                batch=partition.batch,
                shard_id=partition.shard_id,
                start=partition.start,
                closed_end=partition.closed_end,
                limits=s.limits,
            )
            if read.sequence_numbers:
                yield _to_arrow(partition.shard_id, read)
            return
        assert isinstance(partition, KinesisPartition)
        for shard_range in partition.ranges:
            yield from self._read_range(shard_range)

    def _read_range(self, shard_range: ShardRange) -> Iterator[pa.RecordBatch]:
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


@dataclass
class _Plan:
    """One planning round: the shards and where each stands."""

    listed: dict[str, ShardInfo]
    positions: dict[str, ShardPosition]
    eligible: list[ShardInfo]
    lost: list[str]
    list_stats: CallStats
    retention_ms: int


def with_ranges(metrics: Mapping[str, Any], records: Mapping[str, RangeRecord]) -> dict[str, Any]:
    """A batch's planned metrics with what its tasks read (their range records): records, bytes, calls,
    lag and data loss (also what a replay found expired) per shard and in total, the records' mean arrival and the longest read."""
    shards = {shard_id: dict(counts) for shard_id, counts in metrics.get("shards", {}).items()}
    lost = list(metrics.get("data_loss", []))
    for shard_id, record in sorted(records.items()):
        into = shards.setdefault(shard_id, {})
        into.update(
            records=record.records,
            bytes=record.bytes,
            millis_behind_latest=record.millis_behind_latest,
            finished=record.done,
            read_seconds=record.read_seconds,
        )
        for name in _CALL_COUNTS:
            into[name] = int(into.get(name, 0)) + int(getattr(record, name))
        # A gap the first attempt skipped, and one a replay found at the range's start (records expired since).
        gaps = [gap for gap in (record.lost, record.replay_lost) if gap]
        into["data_loss_events"] = len(gaps)
        lost.extend(gaps)
    count = sum(r.records for r in records.values())
    arrivals = sum(r.arrival_sum_us for r in records.values())
    return {
        **metrics,
        "records": count,
        "bytes": sum(r.bytes for r in records.values()),
        "throttled": sum(int(shard.get("throttled", 0)) for shard in shards.values()),
        "retries": sum(int(shard.get("retries", 0)) for shard in shards.values()),
        "data_loss_events": len(lost),
        "data_loss": lost,
        "mean_arrival_at": round(arrivals / count / 1e6, 4) if count else None,
        "read_seconds": max((r.read_seconds for r in records.values()), default=0.0),
        "shards": shards,
    }


_CALL_COUNTS = ("throttled", "retries", "iterator_refreshes")


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

    Spark 4.0 and 4.1 give Python sources no hook into ``query.lastProgress``, so each planned batch writes
    ``<checkpoint>/sources/kinesis/metrics/batch-<id>.json`` (planning time, listing calls) and each shard's
    task records what it read under ``sources/kinesis/ranges/``; this merges the two (records, bytes,
    throttled calls, retries, data-loss events and per shard ``millis_behind_latest``). A shard's numbers
    are there once its task has read it: a ``foreachBatch`` writer sees them after it wrote the batch.
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
    s3 = _lazy_s3(region, endpoint_url)
    ranges = RangeLog(CheckpointStore(checkpoint_location, s3))
    merged = []
    for metrics in read_metrics(checkpoint_location, s3, batch_id=batch_id):
        batch = int(metrics.get("batch_id", -1))
        found = {shard_id: ranges.read_noted(batch, shard_id) for shard_id in metrics.get("read", [])}
        merged.append(with_ranges(metrics, {k: v for k, v in found.items() if v is not None}))
    return merged


def _lazy_s3(region: str, endpoint_url: str | None) -> Any:
    client: list[Any] = []

    def build() -> Any:
        if not client:
            client.append(
                make_client("s3", region=region, endpoint_url=endpoint_url, attempts=CHECKPOINT_S3_ATTEMPTS)
            )
        return client[0]

    return build
