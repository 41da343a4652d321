"""The ingest job's Azure path, as it runs on Synapse (Spark 3.5): Kafka rows -> bronze, exactly once.

These tests run twice in `make test`: in the main environment (pyspark 4.1) and in .venv-spark35 (pyspark 3.5,
Synapse's Spark), so a 4.0-only API in this path fails CI. The end-to-end test reads the local broker (Tansu)
with Spark's own Kafka source, the one Synapse runs; the others feed Parquet files laid out exactly as that
source's rows (its schema) to the same column mapping and foreachBatch writer, to pin replays and commits.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
from deltalake import DeltaTable

from jobs import ingest
from jobs.lake import to_arrow
from jobs.sources.kafka import KafkaSettings, kafka_to_records
from lakestack.emulator.kafka import create_topics

KAFKA_SCHEMA = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, timestampType INT"
T0 = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)


def _kafka_file(folder: Path, name: str, rows: list[tuple[bytes | None, bytes, int, int, int]]) -> None:
    """One file of rows as Spark's Kafka source gives them: (key, value, partition, offset, second)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.binary()),
            "value": pa.array([r[1] for r in rows], pa.binary()),
            "topic": pa.array(["hub"] * len(rows), pa.string()),
            "partition": pa.array([r[2] for r in rows], pa.int32()),
            "offset": pa.array([r[3] for r in rows], pa.int64()),
            "timestamp": pa.array(
                [T0 + dt.timedelta(seconds=r[4]) for r in rows], pa.timestamp("us", tz="UTC")
            ),
            "timestampType": pa.array([0] * len(rows), pa.int32()),
        }
    )
    pq.write_table(table, folder / name)


def _settings(tmp_path: Path) -> ingest.IngestSettings:
    return ingest.IngestSettings(
        source="kafka",
        kafka=KafkaSettings(bootstrap="127.0.0.1:9092", topic="hub"),
        table=str(tmp_path / "bronze"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
    )


def _run(spark, settings: ingest.IngestSettings, source: Path) -> None:
    records = kafka_to_records(
        spark.readStream.schema(KAFKA_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    )
    query = (
        records.writeStream.foreachBatch(ingest.make_batch_writer(spark, settings))
        .option("checkpointLocation", settings.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None


def _bronze_rows(settings: ingest.IngestSettings) -> list[tuple]:
    data = DeltaTable(settings.table).to_pyarrow_dataset().to_table().to_pydict()
    rows = zip(
        data["data"],
        data["partition_key"],
        data["shard_id"],
        data["sequence_number"],
        data["arrival_time"],
        data["batch_id"],
        strict=True,
    )
    return sorted(rows, key=lambda r: (r[2], int(r[3])))


def test_runs_on_the_spark_this_environment_promises():
    # `make test-spark35` sets LAKESTACK_EXPECT_SPARK=3.5: these tests must really have run on Synapse's Spark.
    expected = os.environ.get("LAKESTACK_EXPECT_SPARK", "4.1")
    assert pyspark.__version__.startswith(expected + ".")


def test_kafka_rows_land_in_bronze_once_with_the_c8_columns(spark, tmp_path):
    settings, source = _settings(tmp_path), tmp_path / "kafka"
    _kafka_file(source, "0.parquet", [(b"k1", b'{"n":1}', 0, 41, 0), (None, b'{"n":2}', 1, 7, 1)])
    _kafka_file(source, "1.parquet", [(b"k1", b'{"n":3}', 0, 42, 2)])

    _run(spark, settings, source)

    table = DeltaTable(settings.table)
    assert [f.name for f in table.schema().fields] == list(ingest.BRONZE_COLUMNS)
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in _bronze_rows(settings)] == [
        (b'{"n":1}', "k1", "partition-0", "41", T0, 0),
        (b'{"n":3}', "k1", "partition-0", "42", T0 + dt.timedelta(seconds=2), 1),
        (b'{"n":2}', "", "partition-1", "7", T0 + dt.timedelta(seconds=1), 0),
    ]
    assert table.version() == 1  # one commit per micro-batch (0 and 1)

    # A restart with one new file adds exactly its row, in one more commit.
    _kafka_file(source, "2.parquet", [(b"k2", b'{"n":4}', 1, 8, 3)])
    _run(spark, settings, source)
    assert [r[3] for r in _bronze_rows(settings)] == ["41", "42", "7", "8"]
    assert DeltaTable(settings.table).version() == 2


def test_a_replayed_micro_batch_is_skipped(spark, tmp_path):
    settings, source = _settings(tmp_path), tmp_path / "kafka"
    _kafka_file(source, "0.parquet", [(b"k", b"x", 0, 0, 0), (b"k", b"y", 0, 1, 0)])
    _run(spark, settings, source)
    writer = ingest.make_batch_writer(spark, settings)

    # Spark replays the last batch after a crash between the Delta commit and its own checkpoint commit.
    batch = kafka_to_records(spark.read.schema(KAFKA_SCHEMA).parquet(str(source)))
    writer(batch, 0)

    assert [r[0] for r in _bronze_rows(settings)] == [b"x", b"y"]
    assert DeltaTable(settings.table).version() == 0


def test_to_arrow_gives_the_batch_and_an_empty_batch_its_schema(spark):
    frame = spark.createDataFrame([(1, "a"), (2, None)], "id LONG, name STRING")

    assert to_arrow(frame).to_pydict() == {"id": [1, 2], "name": ["a", None]}
    empty = to_arrow(frame.limit(0))
    assert (empty.num_rows, [(f.name, str(f.type)) for f in empty.schema]) == (
        0,
        [("id", "int64"), ("name", "string")],
    )


def _produce(spark, bootstrap: str, topic: str, ids: range) -> None:
    """Write events ``e<n>`` keyed ``key-<n % 11>`` with Spark's Kafka sink, one record per batch (batch.size 0):
    the producer setting the local broker needs (see lakestack.emulator.kafka)."""
    rows = [(f"key-{n % 11}", json.dumps({"event_id": f"e{n:05d}"})) for n in ids]
    (
        spark.createDataFrame(rows, "key STRING, value STRING")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.batch.size", "0")
        .save()
    )


def test_spark_kafka_source_reads_the_local_broker_into_bronze_once_across_restarts(
    spark, kafka_broker, unique_name, tmp_path
):
    create_topics(kafka_broker, {unique_name: 3})
    _produce(spark, kafka_broker, unique_name, range(300))
    settings = ingest.IngestSettings(
        source="kafka",
        kafka=KafkaSettings(bootstrap=kafka_broker, topic=unique_name, max_offsets_per_trigger=120),
        table=str(tmp_path / "bronze"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
    )

    def bronze() -> dict[str, list]:
        columns = ["data", "shard_id", "sequence_number", "partition_key", "batch_id"]
        return DeltaTable(settings.table).to_pyarrow_dataset().to_table(columns=columns).to_pydict()

    def event_ids() -> list[str]:
        return sorted(json.loads(value)["event_id"] for value in bronze()["data"])

    assert ingest.run(settings, spark=spark) == 0
    assert event_ids() == [f"e{n:05d}" for n in range(300)]
    first = bronze()
    # maxOffsetsPerTrigger holds: 300 records came in batches of at most 120, each one Delta commit.
    per_batch = [first["batch_id"].count(b) for b in sorted(set(first["batch_id"]))]
    assert max(per_batch) <= 120 and len(per_batch) >= 3
    assert DeltaTable(settings.table).version() == len(per_batch)  # create + one commit per batch
    # Each partition's offsets 0..n-1, each once; the key is the partition key.
    positions = sorted(zip(first["shard_id"], map(int, first["sequence_number"]), strict=True))
    counts = {shard: sum(1 for s, _ in positions if s == shard) for shard in {s for s, _ in positions}}
    assert positions == sorted((shard, offset) for shard, n in counts.items() for offset in range(n))
    assert set(counts) <= {"partition-0", "partition-1", "partition-2"}
    assert set(first["partition_key"]) == {f"key-{n}" for n in range(11)}

    version = DeltaTable(settings.table).version()
    assert ingest.run(settings, spark=spark) == 0  # nothing new: nothing added
    assert DeltaTable(settings.table).version() == version

    _produce(spark, kafka_broker, unique_name, range(300, 380))
    assert ingest.run(settings, spark=spark) == 0
    assert event_ids() == [f"e{n:05d}" for n in range(380)]
