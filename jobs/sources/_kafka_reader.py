"""A Kafka topic as a Spark 4.0 Python data source on ``confluent-kafka``: the local stand-in for Spark's Kafka jar.

It emits exactly the columns of Spark's built-in Kafka source, so :func:`jobs.sources.kafka.kafka_to_records`
maps both the same way. How a micro-batch is planned (``latestOffset``, driver side):
1. List the topic's partitions; new ones start at their earliest retained record.
2. From each partition's position, read up to its share of ``maxOffsetsPerTrigger``, stopping at the end of
   the partition as the consumer's fetch reports it (or after a short wait). The batch ends after the last
   offset actually read: the broker's ListOffsets end is never used to plan (see ``_kafka_offsets``).
3. The rows read travel inside the Spark task (Arrow IPC); a replay after a restart re-reads the exact range.
After a restart the position comes from the newest entry of Spark's offset log (Spark 4.0 asks
``latestOffset()`` before saying where the query stands), so no batch ever ends before the checkpointed start.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs._options import parse_bool
from jobs.sources._checkpoint import last_logged, pinned_start
from jobs.sources._kafka_offsets import (
    TopicOffsets,
    advance,
    check_retained,
    partition_cap,
    raise_on_loss,
    ranges,
)
from jobs.sources._python_worker import keep_unchanged_zip_directories
from jobs.sources.errors import DataLossError, KafkaReadError, SourceSettingsError, StreamNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.sources.kafka import KafkaSettings

SOURCE_NAME = "lakestack-kafka"
SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)
_ARROW_FIELDS: list[pa.Field[Any]] = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
_ARROW_SCHEMA = pa.schema(_ARROW_FIELDS)
# How long planning waits for the end of a partition; a partition still filling is simply read on.
PLAN_WAIT_S = 2.0
# How long a replay waits for a range that was read before.
REPLAY_WAIT_S = 60.0
METADATA_TIMEOUT_S = 10.0
# confluent-kafka timestamp types -> Spark's timestampType column (0 CreateTime, 1 LogAppendTime).
_TIMESTAMP_TYPES = {1: 0, 2: 1}


@dataclass(frozen=True)
class ReaderSettings:
    """The options of one Python Kafka source, as Spark hands them over."""

    bootstrap: str
    topic: str
    checkpoint_location: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 100_000
    fail_on_data_loss: bool = True
    secret_env: str | None = None

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ReaderSettings:
        opts = {k.lower(): v for k, v in options.items()}
        missing = [k for k in ("bootstrap", "topic", "checkpointlocation") if not opts.get(k)]
        if missing:
            raise SourceSettingsError(
                f"expected options bootstrap, topic and checkpointLocation on the {SOURCE_NAME} source; missing "
                f"{missing}. Use jobs.sources.kafka.read_kafka_stream(...), which sets them."
            )
        checkpoint = opts["checkpointlocation"]
        if urlparse(checkpoint).scheme not in ("", "file") and len(urlparse(checkpoint).scheme) != 1:
            raise SourceSettingsError(
                f"the Python Kafka source keeps its start next to a local checkpoint; found {checkpoint!r}. "
                "Use a local checkpoint path, or Spark's Kafka source (--kafka-reader spark) on a cluster."
            )
        return cls(
            bootstrap=opts["bootstrap"],
            topic=opts["topic"],
            checkpoint_location=checkpoint,
            starting_offsets=opts.get("startingoffsets", "earliest"),
            max_offsets_per_trigger=int(opts.get("maxoffsetspertrigger", "100000")),
            fail_on_data_loss=parse_bool(opts.get("failondataloss", "true"), name="failOnDataLoss"),
            secret_env=opts.get("secretenv") or None,
        )

    def consumer_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            # Positions live in Spark's checkpoint; the group is never committed to.
            "group.id": f"lakestack-ingest-{self.topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "socket.connection.setup.timeout.ms": 10_000,
        }
        if self.secret_env:
            # Event Hubs' Kafka endpoint: SASL PLAIN over TLS, user "$ConnectionString".
            config.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "$ConnectionString",
                    "sasl.password": os.environ.get(self.secret_env, ""),
                }
            )
        return config


class KafkaRange(InputPartition):
    """One partition's range of a micro-batch, ``[begin, until)``, with its rows when read while planning."""

    def __init__(self, partition: int, begin: int, until: int, arrow: bytes | None) -> None:
        super().__init__(partition)
        self.partition, self.begin, self.until, self.arrow = partition, begin, until, arrow

    def __repr__(self) -> str:
        return f"KafkaRange(partition {self.partition}: {self.begin}..{self.until})"


def _to_arrow(messages: list[Any]) -> pa.RecordBatch:
    keys, values, topics, partitions, offsets, stamps, types = [], [], [], [], [], [], []
    for message in messages:
        kind, millis = message.timestamp()
        keys.append(message.key())
        values.append(message.value())
        topics.append(message.topic())
        partitions.append(message.partition())
        offsets.append(message.offset())
        stamps.append(millis * 1000 if kind in _TIMESTAMP_TYPES else None)
        types.append(_TIMESTAMP_TYPES.get(kind))
    columns = [keys, values, topics, partitions, offsets, stamps, types]
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, _ARROW_SCHEMA, strict=True)],
        schema=_ARROW_SCHEMA,
    )


def _ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _no_s3() -> Any:
    raise SourceSettingsError("the Python Kafka source keeps its state next to a local checkpoint only.")


class _Reads:
    """What one read round collected per partition, and the offset each partition expects next."""

    def __init__(self, positions: dict[int, int]) -> None:
        self.messages: dict[int, list[Any]] = {p: [] for p in positions}
        self.expect = dict(positions)


class KafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches from the records it reads; see the module docstring."""

    def __init__(self, settings: ReaderSettings) -> None:
        self._settings = settings
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.RLock()
        self._consumer: Any = None
        self._position: TopicOffsets | None = None
        self._initial: TopicOffsets | None = None
        self._planned: dict[tuple[int, int, int], bytes] = {}

    # Executors get the settings only, never a consumer or planned rows.
    def __getstate__(self) -> dict[str, Any]:
        return {"_settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._settings = state["_settings"]
        self._reset()

    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self._settings.consumer_config())
        return self._consumer

    def _partitions(self) -> list[int]:
        s = self._settings
        metadata = self._client().list_topics(s.topic, timeout=METADATA_TIMEOUT_S)
        topic = metadata.topics.get(s.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise StreamNotFoundError(
                f"topic {s.topic!r}: expected it at {s.bootstrap}, found "
                f"{topic.error if topic is not None and topic.error is not None else 'no such topic'}. "
                "Create it (lakestack starts the local broker with it), or pass the right --topic/--kafka-bootstrap."
            )
        return sorted(topic.partitions)

    def _watermarks(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        from confluent_kafka import TopicPartition

        client = self._client()
        return {
            p: client.get_watermark_offsets(
                TopicPartition(self._settings.topic, p), timeout=METADATA_TIMEOUT_S
            )
            for p in partitions
        }

    def _starts(self, partitions: list[int]) -> dict[int, int]:
        """Where a partition starts before anything of it was read: its earliest record, or its end."""
        marks = self._watermarks(partitions)
        # "latest" takes the broker's reported end; Tansu under-reports it (module docstring of
        # _kafka_offsets), so locally "latest" may re-read some records: the demo and tests use "earliest".
        index = 1 if self._settings.starting_offsets == "latest" else 0
        return {p: int(marks[p][index]) for p in partitions}

    def _initial_offsets(self) -> TopicOffsets:
        if self._initial is None:
            s = self._settings
            spec = json.dumps(TopicOffsets(s.topic, self._starts(self._partitions())).to_json())
            # Pinned next to the checkpoint on first use: a restart before the first batch keeps the start.
            pinned = json.loads(pinned_start(s.checkpoint_location, spec, _no_s3, source="kafka"))
            initial = TopicOffsets.from_json(s.topic, pinned)
            if initial is None:
                raise SourceSettingsError(
                    f"the checkpoint {s.checkpoint_location} was started on another topic than {s.topic!r}; "
                    "use a new checkpoint for a new topic."
                )
            self._initial = initial
        return self._initial

    def _restore(self) -> TopicOffsets:
        if self._position is None:
            s = self._settings
            logged = last_logged(
                s.checkpoint_location, _no_s3, lambda o: TopicOffsets.from_json(s.topic, o) is not None
            )
            found = None if logged is None else TopicOffsets.from_json(s.topic, logged[1])
            self._position = found if found is not None else self._initial_offsets()
        return self._position

    def initialOffset(self) -> dict[str, Any]:
        with self._lock:
            return self._initial_offsets().to_json()

    def latestOffset(self) -> dict[str, Any]:
        with self._lock:
            s = self._settings
            partitions = self._partitions()
            start = self._restore()
            known = set(start.positions)
            fresh = [p for p in partitions if p not in known]
            if fresh:
                start = start.with_new_partitions(self._starts(fresh))
            marks = self._watermarks(partitions)
            gaps = check_retained(s.topic, start.positions, {p: int(low) for p, (low, _) in marks.items()})
            raise_on_loss(gaps, fail_on_data_loss=s.fail_on_data_loss)
            if gaps:  # opted out: skip to the earliest retained record
                start = TopicOffsets(
                    s.topic,
                    {p: max(o, int(marks[p][0])) if p in marks else o for p, o in start.positions.items()},
                )
            cap = partition_cap(s.max_offsets_per_trigger, len(partitions))
            reads = self._read(dict(start.positions), cap=cap, until=None, wait_s=PLAN_WAIT_S)
            last = {p: msgs[-1].offset() for p, msgs in reads.messages.items() if msgs}
            end = advance(start, last)
            for p, msgs in reads.messages.items():
                if msgs:
                    self._planned[(p, start.positions[p], end.positions[p])] = _ipc_bytes(_to_arrow(msgs))
            self._position = end
            return end.to_json()

    def _read(
        self, positions: dict[int, int], *, cap: int, until: dict[int, int] | None, wait_s: float
    ) -> _Reads:
        """Read each partition from its position: up to ``cap`` records and, planning, up to its end;
        replaying, up to ``until`` (exclusive)."""
        from confluent_kafka import TopicPartition

        client = self._client()
        reads = _Reads(positions)
        pending = set(positions)
        client.assign([TopicPartition(self._settings.topic, p, o) for p, o in positions.items()])
        deadline = time.monotonic() + wait_s
        try:
            while pending and time.monotonic() < deadline:
                for message in client.consume(num_messages=1_000, timeout=0.1):
                    self._take(message, reads, pending, cap=cap, until=until)
        finally:
            client.unassign()
        if until is not None and pending:
            raise DataLossError(
                f"expected to re-read topic {self._settings.topic!r} partitions {sorted(pending)} up to offsets "
                f"{ {p: until[p] for p in sorted(pending)} } within {wait_s:.0f}s, found them short (read to "
                f"{ {p: reads.expect[p] for p in sorted(pending)} }): the records expired before this replay. "
                "Restart from a new checkpoint."
            )
        return reads

    def _take(
        self, message: Any, reads: _Reads, pending: set[int], *, cap: int, until: dict[int, int] | None
    ) -> None:
        from confluent_kafka import KafkaError

        partition = message.partition()
        if partition not in pending:
            return
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if until is None:
                    pending.discard(partition)  # planning: caught up with what the fetch saw
                return
            if error.retriable():
                return
            raise KafkaReadError(
                f"topic {self._settings.topic!r} partition {partition} at {self._settings.bootstrap}: {error.str()}"
            )
        offset = message.offset()
        if offset < reads.expect[partition]:
            return  # fetched again after a re-assign
        reads.messages[partition].append(message)
        reads.expect[partition] = offset + 1
        done_replaying = until is not None and reads.expect[partition] >= until[partition]
        if len(reads.messages[partition]) >= cap or done_replaying:
            pending.discard(partition)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaRange]:
        with self._lock:
            topic = self._settings.topic
            before = TopicOffsets.from_json(topic, start) or TopicOffsets(topic, {})
            after = TopicOffsets.from_json(topic, end) or TopicOffsets(topic, {})
            found = [
                KafkaRange(p, begin, until, self._planned.pop((p, begin, until), None))
                for p, begin, until in ranges(before.positions, after.positions)
            ]
            # Rows of a plan Spark dropped are never claimed: do not let them pile up.
            self._planned.clear()
            return found

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        keep_unchanged_zip_directories()  # once per worker: every later task skips re-reading pyspark.zip
        assert isinstance(partition, KafkaRange)
        if partition.arrow is not None:
            yield from pa.ipc.open_stream(partition.arrow)
            return
        # A replayed batch (restart): read exactly the planned range again.
        reads = self._read(
            {partition.partition: partition.begin},
            cap=partition.until - partition.begin,
            until={partition.partition: partition.until},
            wait_s=REPLAY_WAIT_S,
        )
        messages = [m for m in reads.messages[partition.partition] if m.offset() < partition.until]
        yield _to_arrow(messages)
        self.stop()

    def commit(self, end: dict[str, Any]) -> None:
        return None

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class KafkaPythonDataSource(DataSource):
    """``spark.readStream.format("lakestack-kafka")``: options bootstrap, topic, checkpointLocation,
    startingOffsets, maxOffsetsPerTrigger, failOnDataLoss, secretEnv (the variable holding a connection
    string; the value never travels in the options)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(ReaderSettings.from_options(dict(self.options)))


def read_with_python_source(
    spark: SparkSession, settings: KafkaSettings, *, checkpoint_location: str
) -> DataFrame:
    """Register the Python Kafka source and return a streaming DataFrame in Spark's Kafka columns."""
    if settings.key_vault is not None:
        raise SourceSettingsError(
            "--kafka-key-vault is read by the Synapse runtime, where Spark's own Kafka source runs; the Python "
            "source takes the connection string from --kafka-secret-env VAR."
        )
    spark.dataSource.register(KafkaPythonDataSource)
    options = {
        "bootstrap": settings.bootstrap,
        "topic": settings.topic,
        "checkpointLocation": checkpoint_location,
        "startingOffsets": settings.starting_offsets,
        "maxOffsetsPerTrigger": str(settings.max_offsets_per_trigger),
        "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
    }
    if settings.secret_env:
        options["secretEnv"] = settings.secret_env
    return spark.readStream.format(SOURCE_NAME).options(**options).load()
