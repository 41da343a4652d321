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

import datetime as dt
import json
import logging
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from jobs.sources._checkpoint import last_logged_offset, pinned_start, read_metrics, write_metrics
from jobs.sources._client import CallStats, RetryPolicy, call_with_retry, explain_access_error, make_client
from jobs.sources._shards import ShardInfo, ShardRead, ShardReader, list_shards
from jobs.sources.errors import DataLossError, SourceSettingsError

log = logging.getLogger("lakestack.sources.kinesis")

SCHEMA = StructType(
    [
        StructField("data", BinaryType(), False),
        StructField("partition_key", StringType(), False),
        StructField("shard_id", StringType(), False),
        StructField("sequence_number", StringType(), False),
        StructField("arrival_time", TimestampType(), False),
    ]
)
_ARROW_SCHEMA = pa.schema(
    [
        pa.field("data", pa.binary(), nullable=False),
        pa.field("partition_key", pa.string(), nullable=False),
        pa.field("shard_id", pa.string(), nullable=False),
        pa.field("sequence_number", pa.string(), nullable=False),
        pa.field("arrival_time", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
# Ranges bigger than this are re-read by the executor instead of travelling inside the task
# (spark.rpc.message.maxSize is 128 MiB by default).
DEFAULT_INLINE_BYTES_PER_SHARD = 32 * 1024 * 1024
INLINE_BYTES_PER_BATCH = 256 * 1024 * 1024


def parse_starting_position(value: str, *, now: dt.datetime | None = None) -> str:
    """Turn ``trim-horizon`` | ``latest`` | ``at-timestamp=<ISO-8601>`` into the offset's start spec.

    ``latest`` is pinned to the moment the query first plans (AT_TIMESTAMP of now), so a restart before
    the first batch and a shard that stays empty for a while both keep the same meaning.
    """
    text = value.strip()
    if text == "trim-horizon":
        return "TRIM_HORIZON"
    if text == "latest":
        moment = now or dt.datetime.now(dt.UTC)
        return f"AT_TIMESTAMP:{int(moment.timestamp() * 1000)}"
    if text.startswith("at-timestamp="):
        raw = text.split("=", 1)[1]
        try:
            moment = dt.datetime.fromisoformat(raw)
        except ValueError as error:
            raise SourceSettingsError(
                f"expected starting position 'at-timestamp=<ISO-8601>' like 'at-timestamp=2025-01-31T12:00:00Z',"
                f" found timestamp {raw!r} which is not ISO-8601. Fix --starting-position."
            ) from error
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return f"AT_TIMESTAMP:{int(moment.timestamp() * 1000)}"
    raise SourceSettingsError(
        f"expected starting position 'trim-horizon', 'latest' or 'at-timestamp=<ISO-8601>', found {value!r}. "
        "Fix --starting-position."
    )


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise SourceSettingsError(f"expected option {name} to be true or false, found {value!r}.")


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
        except ValueError as error:
            raise SourceSettingsError(f"expected integer source options, {error}") from error
        if cap < 1:
            raise SourceSettingsError(f"expected --max-records-per-shard >= 1, found {cap}.")
        if attempts < 1:
            raise SourceSettingsError(f"expected maxAttempts >= 1, found {attempts}.")
        return cls(
            stream_name=opts["streamname"],
            region=opts["region"],
            checkpoint_location=opts["checkpointlocation"],
            start=opts.get("start") or parse_starting_position(opts.get("startingposition", "trim-horizon")),
            endpoint_url=opts.get("endpointurl") or None,
            max_records_per_shard=cap,
            fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
            client_factory=opts.get("clientfactory") or None,
            max_attempts=attempts,
            inline_bytes_per_shard=inline,
        )


@dataclass(frozen=True)
class ShardRange:
    """One shard's range of one micro-batch: after ``start`` up to ``end_sequence`` inclusive.

    ``arrow`` holds the rows read while planning (Arrow IPC); None means the executor reads the range.
    """

    shard_id: str
    start: dict[str, Any]
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
            + ", ".join(f"{r.shard_id}:{r.start.get('seq')}..{r.end_sequence}" for r in self.ranges)
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


def _unread_state() -> dict[str, Any]:
    # A shard the offset has not seen yet (born after the query started) holds only new data.
    return {"seq": None, "from": "TRIM_HORIZON", "done": False, "ts": None}


def _eligible(listed: dict[str, ShardInfo], shards: dict[str, dict[str, Any]]) -> list[ShardInfo]:
    """Listed shards not read to their end whose listed parents all are: a child waits for its parents."""
    return [
        info
        for shard_id, info in listed.items()
        if not shards[shard_id]["done"]
        and all(p not in listed or shards.get(p, {}).get("done") for p in info.parents)
    ]


def _start_key(shard_id: str, state: dict[str, Any]) -> str:
    return json.dumps([shard_id, state.get("seq"), state.get("from"), state.get("done")])


def _after(state: dict[str, Any], read: ShardRead) -> dict[str, Any]:
    if read.last_sequence is None:
        return state
    return {**state, "seq": read.last_sequence, "ts": read.last_arrival_ms}


def _merge(first: ShardRead, more: ShardRead) -> ShardRead:
    inline = first.inline and more.inline
    first.stats.add(more.stats)
    return ShardRead(
        data=first.data + more.data if inline else [],
        partition_keys=first.partition_keys + more.partition_keys if inline else [],
        sequence_numbers=first.sequence_numbers + more.sequence_numbers,
        arrival_micros=first.arrival_micros + more.arrival_micros if inline else [],
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


class KinesisStreamReader(DataSourceStreamReader):
    """Plans capped micro-batches over a stream's shards; see the module docstring."""

    def __init__(self, settings: KinesisSourceSettings) -> None:
        self._settings = settings
        self._lock = threading.RLock()
        self._client: Any = None
        self._s3_client: Any = None
        self._position: dict[str, Any] | None = None
        self._next_batch = 0
        self._prefetch: dict[tuple[str, str | None, str], bytes] = {}
        self._initial_offset: dict[str, Any] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._prefetched: dict[str, Future[ShardRead]] = {}

    # The reader is pickled to executors for read(): ship settings only, never clients or prefetched rows.
    def __getstate__(self) -> dict[str, Any]:
        return {"_settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_settings"])

    def _kinesis(self) -> Any:
        if self._client is None:
            s = self._settings
            self._client = make_client(
                "kinesis", region=s.region, endpoint_url=s.endpoint_url, factory=s.client_factory
            )
        return self._client

    def _s3(self) -> Any:
        # Built once: a fresh botocore session per metrics write would load the S3 model every batch.
        if self._s3_client is None:
            s = self._settings
            self._s3_client = make_client("s3", region=s.region, endpoint_url=s.endpoint_url)
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

    def _call(self, fn: Any, what: str) -> Any:
        s = self._settings
        try:
            return call_with_retry(
                fn,
                what=f"{what} on stream {s.stream_name!r}",
                policy=RetryPolicy(max_attempts=s.max_attempts),
                stats=CallStats(),
                rng=random.Random(),
            )
        except Exception as error:
            explain_access_error(error, stream=s.stream_name, region=s.region, endpoint_url=s.endpoint_url)
            raise

    def _restore(self) -> dict[str, Any]:
        if self._position is None:
            s = self._settings
            logged = last_logged_offset(s.checkpoint_location, s.stream_name, self._s3)
            if logged is not None:
                self._next_batch = logged[0] + 1
                self._position = logged[1]
            else:
                self._position = self._initial()
        return self._position

    def _initial(self) -> dict[str, Any]:
        if self._initial_offset is None:
            s = self._settings
            # The start spec is pinned next to the checkpoint the first time: "latest" means the moment the
            # query first ran, even when it stopped before its first batch and Spark logged no offset.
            start = pinned_start(s.checkpoint_location, s.start, self._s3)
            shards = list_shards(self._kinesis(), s.stream_name, self._call)
            self._initial_offset = {
                "stream": s.stream_name,
                "shards": {
                    info.shard_id: {"seq": None, "from": start, "done": False, "ts": None} for info in shards
                },
            }
        return self._initial_offset

    def initialOffset(self) -> dict[str, Any]:
        with self._lock:
            return self._initial()

    def latestOffset(self) -> dict[str, Any]:
        with self._lock:
            start = self._restore()
            end, metrics = self._plan(start)
            if end != start:
                metrics["batch_id"] = self._next_batch
                self._record_metrics(metrics)
                self._next_batch += 1
            self._position = end
            return end

    def _plan(self, start: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        s = self._settings
        begun = time.monotonic()
        client = self._kinesis()
        summary = self._call(
            lambda: client.describe_stream_summary(StreamName=s.stream_name), "DescribeStreamSummary"
        )
        retention_ms = int(summary["StreamDescriptionSummary"].get("RetentionPeriodHours", 24)) * 3_600_000
        listed = {info.shard_id: info for info in list_shards(client, s.stream_name, self._call)}
        old: dict[str, dict[str, Any]] = start["shards"]
        lost: list[str] = []
        for shard_id, state in old.items():
            if shard_id not in listed and not state["done"]:
                gap = (
                    f"stream {s.stream_name!r} shard {shard_id} expired from the stream (no longer listed) "
                    f"before it was read to its end; unread records after sequence number {state['seq']} are lost"
                )
                if s.fail_on_data_loss:
                    raise DataLossError(
                        f"data loss on {gap}. Restart from a new checkpoint or pass --fail-on-data-loss false."
                    )
                log.warning("kinesis source: %s", gap)
                lost.append(gap)
        new = {shard_id: dict(old.get(shard_id) or _unread_state()) for shard_id in sorted(listed)}
        eligible = _eligible(listed, new)
        reader = self._shard_reader(retention_ms=retention_ms)
        pool = self._executor()
        futures = {
            info.shard_id: self._prefetched.pop(_start_key(info.shard_id, new[info.shard_id]), None)
            or pool.submit(self._read_shard, reader, info, new[info.shard_id], len(eligible))
            for info in eligible
        }
        # Futures of positions the plan moved away from (e.g. after a restart) are not worth waiting for.
        for stale in self._prefetched.values():
            stale.cancel()
        self._prefetched.clear()
        reads: dict[str, ShardRead] = {}
        for info in eligible:
            read = futures[info.shard_id].result()
            wanted = self._settings.max_records_per_shard - len(read.sequence_numbers)
            if wanted > 0 and not read.finished and read.lost is None:
                # The read-ahead may predate records that arrived since: top the batch up to the cap.
                more = reader.read(
                    info.shard_id,
                    _after(new[info.shard_id], read),
                    closed_end=info.ending_sequence,
                    max_records=wanted,
                    inline_bytes=self._inline_budget(len(eligible)) - read.nbytes,
                )
                read = _merge(read, more)
            reads[info.shard_id] = read
        shard_metrics: dict[str, Any] = {}
        for shard_id, read in reads.items():
            state = new[shard_id]
            if read.sequence_numbers:
                key = (shard_id, state["seq"], read.last_sequence)
                if read.inline:
                    self._prefetch[key] = _ipc_bytes(_to_arrow(shard_id, read))
                state["seq"] = read.last_sequence
                state["ts"] = read.last_arrival_ms
            if read.finished:
                state["done"] = True
            if read.lost:
                lost.append(read.lost)
            shard_metrics[shard_id] = {
                "records": len(read.sequence_numbers),
                "bytes": read.nbytes,
                "millis_behind_latest": read.millis_behind_latest,
                "throttled": read.stats.throttled,
                "retries": read.stats.retries,
                "iterator_refreshes": read.stats.iterator_refreshes,
                "finished": read.finished,
            }
        end = {"stream": s.stream_name, "shards": {k: new[k] for k in sorted(new)}}
        self._read_ahead(reader, listed, end["shards"])
        metrics = {
            "stream": s.stream_name,
            "records": sum(m["records"] for m in shard_metrics.values()),
            "bytes": sum(m["bytes"] for m in shard_metrics.values()),
            "throttled": sum(m["throttled"] for m in shard_metrics.values()),
            "retries": sum(m["retries"] for m in shard_metrics.values()),
            "data_loss_events": len(lost),
            "data_loss": lost,
            "planning_seconds": round(time.monotonic() - begun, 3),
            "shards": shard_metrics,
        }
        return end, metrics

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kinesis-read")
        return self._pool

    def _read_ahead(
        self, reader: ShardReader, listed: dict[str, ShardInfo], shards: dict[str, dict[str, Any]]
    ) -> None:
        """Start reading the next batch while Spark runs this one: hides a batch's fixed cost behind I/O.

        The read-ahead starts at the end just planned; the next plan uses it only when its start matches.
        """
        pool = self._executor()
        ready = _eligible(listed, shards)
        for info in ready:
            state = shards[info.shard_id]
            key = _start_key(info.shard_id, state)
            self._prefetched[key] = pool.submit(self._read_shard, reader, info, dict(state), len(ready))

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _inline_budget(self, shards: int) -> int:
        # Bounded per batch as well as per shard: a stream with hundreds of shards must not pin GBs here.
        return min(self._settings.inline_bytes_per_shard, INLINE_BYTES_PER_BATCH // max(1, shards))

    def _read_shard(
        self, reader: ShardReader, info: ShardInfo, state: dict[str, Any], shards: int
    ) -> ShardRead:
        return reader.read(
            info.shard_id,
            state,
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
        write_metrics(self._settings.checkpoint_location, metrics["batch_id"], metrics, self._s3)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KinesisPartition]:
        with self._lock:
            ranges: list[ShardRange] = []
            before = start.get("shards", {})
            for shard_id, state in end["shards"].items():
                first = before.get(shard_id) or _unread_state()
                if state["seq"] is None or state["seq"] == first["seq"]:
                    continue
                arrow = self._prefetch.pop((shard_id, first["seq"], state["seq"]), None)
                ranges.append(ShardRange(shard_id, first, state["seq"], arrow))
            # Whatever was not claimed belongs to a plan Spark dropped; never let it grow.
            self._prefetch.clear()
            return pack_ranges(ranges, task_bytes=self._settings.inline_bytes_per_shard)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
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


class KinesisDataSource(DataSource):
    """``spark.readStream.format("kinesis")``: options streamName, region, checkpointLocation, endpointUrl,
    startingPosition, maxRecordsPerShard, failOnDataLoss, clientFactory."""

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KinesisStreamReader(KinesisSourceSettings.from_options(dict(self.options)))


def read_kinesis_stream(
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

    Returns:
        A streaming DataFrame with columns data, partition_key, shard_id, sequence_number, arrival_time.

    Raises:
        SourceSettingsError: an option is invalid.
    """
    start = parse_starting_position(starting_position)
    if max_records_per_shard < 1:
        raise SourceSettingsError(f"expected --max-records-per-shard >= 1, found {max_records_per_shard}.")
    spark.dataSource.register(KinesisDataSource)
    options = {
        "streamName": stream_name,
        "region": region,
        "checkpointLocation": checkpoint_location,
        "start": start,
        "maxRecordsPerShard": str(max_records_per_shard),
        "failOnDataLoss": str(fail_on_data_loss).lower(),
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

    Args:
        checkpoint_location: the query's checkpoint (local path or s3://).
        batch_id: only this micro-batch (a list of at most one entry).
        region: region of the checkpoint bucket (s3:// only).
        endpoint_url: emulator endpoint for an s3:// checkpoint.
    """
    return read_metrics(
        checkpoint_location,
        lambda: make_client("s3", region=region, endpoint_url=endpoint_url),
        batch_id=batch_id,
    )
