"""The ingest job's Azure path, as it runs on Synapse (Spark 3.5): Kafka rows -> bronze, exactly once.

These tests run twice in `make test`: in the main environment (pyspark 4.0) and in .venv-spark35 (pyspark 3.5,
Synapse's Spark), so a 4.0-only API in this path fails CI. Spark's own Kafka source cannot be loaded here (no
Maven), so the micro-batches come from Parquet files laid out exactly as that source's rows (its schema); from
there on, everything is the code Synapse runs: the column mapping, the ingest job's foreachBatch writer, the
Arrow of the batch and the delta-rs commit.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
from deltalake import DeltaTable

from jobs import ingest
from jobs.lake import to_arrow
from jobs.sources.kafka import KafkaSettings, choose_reader, kafka_to_records

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
    expected = os.environ.get("LAKESTACK_EXPECT_SPARK", "4.0")
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


def test_the_reader_choice_on_this_spark(spark):
    python_sources = hasattr(spark, "dataSource")
    assert python_sources is (pyspark.__version__ >= "4")
    # No Kafka jar here: Spark 4.0 falls back to the Python source; Spark 3.5 cannot, and says what to do.
    if python_sources:
        assert choose_reader("auto", spark_kafka=False, python_sources=python_sources) == "python"
    else:
        with pytest.raises(ValueError, match="no Kafka reader can run here"):
            choose_reader("auto", spark_kafka=False, python_sources=python_sources)
    assert choose_reader("auto", spark_kafka=True, python_sources=python_sources) == "spark"
