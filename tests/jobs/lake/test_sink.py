"""foreach_batch_writer: real streaming queries over fixed JSON files, exactly-once across a crash, with each
engine: delta-spark (the batch DataFrame written by Spark) and delta-rs (the batch through Arrow). Tables are
read back with delta-rs either way, so a table delta-spark writes is also proven readable by the tools."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import boto3
import pytest

from jobs.lake import DeltaRsEngine, JvmDeltaEngine, foreach_batch_writer, storage_options_for

SCHEMA = "id LONG, name STRING, amount DOUBLE"


@pytest.fixture(params=["jvm", "delta-rs"])
def new_engine(request, spark):
    """Makes a new engine of the parameter's kind each call: a restart gets one that remembers nothing."""
    if request.param == "jvm":
        return lambda: JvmDeltaEngine(spark)
    return DeltaRsEngine


def _write_json(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _run(spark, source: Path, checkpoint: Path, writer) -> None:
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None


def test_stream_writes_each_file_as_one_commit(spark, new_engine, tmp_path, caplog):
    source, checkpoint, table = tmp_path / "in", tmp_path / "chk", str(tmp_path / "table")
    _write_json(
        source, "a.json", [{"id": 1, "name": "a", "amount": 1.5}, {"id": 2, "name": "b", "amount": 2.5}]
    )
    _write_json(source, "b.json", [{"id": 3, "name": "c", "amount": 3.5}])
    writer = foreach_batch_writer(
        new_engine().table(table, storage_options=storage_options_for(table)), app_id="q-sink"
    )
    with caplog.at_level(logging.INFO, logger="jobs.lake.sink"):
        _run(spark, source, checkpoint, writer)

    engine = DeltaRsEngine()
    rows = sorted(engine.table(table).read().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "name": "a", "amount": 1.5},
        {"id": 2, "name": "b", "amount": 2.5},
        {"id": 3, "name": "c", "amount": 3.5},
    ]
    assert [(c.version, c.app_id, c.batch_id) for c in engine.table(table).commits()] == [
        (0, "q-sink", 0),
        (1, "q-sink", 1),
    ]
    lines = [r.getMessage() for r in caplog.records if "app=q-sink" in r.getMessage()]
    assert len(lines) == 2
    assert "batch=0 rows=2 version=0 committed" in lines[0]


def test_crash_between_delta_commit_and_checkpoint_commit_changes_nothing(spark, new_engine, tmp_path):
    source, checkpoint, table = tmp_path / "in", tmp_path / "chk", str(tmp_path / "table")
    _write_json(source, "a.json", [{"id": 1, "name": "a", "amount": 1.0}])
    _write_json(
        source, "b.json", [{"id": 2, "name": "b", "amount": 2.0}, {"id": 3, "name": "c", "amount": 3.0}]
    )
    _run(spark, source, checkpoint, foreach_batch_writer(new_engine().table(table), app_id="q-crash"))
    engine = DeltaRsEngine()
    assert engine.table(table).version() == 1
    assert engine.table(table).read().num_rows == 3

    # The Delta commit of batch 1 happened, Spark's commit log entry did not: Spark replays batch 1.
    commits = sorted(
        (checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    last = [p for p in commits if p.name.isdigit()][-1]
    assert last.name == "1"
    last.unlink()
    # Hadoop's checksum sidecar would make Spark's rewrite of commits/1 fail; a real crash leaves neither.
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
    # The restart is a new engine and writer: only the table's own log can tell that batch 1 is in.
    _run(spark, source, checkpoint, foreach_batch_writer(new_engine().table(table), app_id="q-crash"))

    assert engine.table(table).version() == 1
    assert sorted(r["id"] for r in engine.table(table).read().to_pylist()) == [1, 2, 3]
    assert (checkpoint / "commits" / "1").exists()


def test_replayed_batch_is_skipped_without_reading_it(spark, tmp_path):
    table = str(tmp_path / "table")
    df = spark.createDataFrame([(1, "a", 1.0)], SCHEMA)
    prepared: list[int] = []  # prepare runs just before the batch is read (toArrow), so it counts reads

    def prepare(frame, batch_id):
        prepared.append(batch_id)
        return frame

    writer = foreach_batch_writer(DeltaRsEngine().table(table), app_id="q-replay", prepare=prepare)
    writer(df, 0)
    writer(df, 0)
    writer(df, 0)
    assert prepared == [0]
    engine = DeltaRsEngine()
    assert engine.table(table).version() == 0
    assert engine.table(table).read().num_rows == 1


def test_empty_batch_still_commits_its_transaction(spark, new_engine, tmp_path):
    table = str(tmp_path / "table")
    writer = foreach_batch_writer(new_engine().table(table), app_id="q-empty")
    writer(spark.createDataFrame([(1, "a", 1.0)], SCHEMA), 0)
    writer(spark.createDataFrame([], SCHEMA), 1)
    engine = DeltaRsEngine()
    assert engine.table(table).version() == 1
    assert engine.table(table).transaction_version("q-empty") == 1
    assert engine.table(table).read().num_rows == 1


def test_skip_empty_commits_nothing_for_a_batch_without_rows(spark, new_engine, tmp_path):
    table = str(tmp_path / "table")
    measured: list[tuple[int, int, bool]] = []
    writer = foreach_batch_writer(
        new_engine().table(table),
        app_id="q-skip",
        skip_empty=True,
        timings=lambda batch_id, m: measured.append((batch_id, m["rows"], m["committed"])),
    )
    writer(spark.createDataFrame([(1, "a", 1.0)], SCHEMA), 0)
    writer(spark.createDataFrame([], SCHEMA), 1)
    writer(spark.createDataFrame([], SCHEMA), 2)
    writer(spark.createDataFrame([(2, "b", 2.0), (3, "c", 3.0)], SCHEMA), 3)
    engine = DeltaRsEngine()
    assert engine.table(table).version() == 1
    assert engine.table(table).transaction_version("q-skip") == 3
    assert engine.table(table).read().num_rows == 3
    assert measured == [(0, 1, True), (1, 0, False), (2, 0, False), (3, 2, True)]


def test_prepare_runs_before_the_write(spark, new_engine, tmp_path):
    table = str(tmp_path / "table")
    writer = foreach_batch_writer(
        new_engine().table(table),
        app_id="q-prep",
        prepare=lambda df, batch_id: df.where("amount > 1").drop("name"),
    )
    writer(spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], SCHEMA), 0)
    assert DeltaRsEngine().table(table).read().to_pylist() == [{"id": 2, "amount": 2.0}]


def test_writer_on_emulated_s3(spark, new_engine, moto_endpoint, unique_name):
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=unique_name)
    table = f"s3://{unique_name}/bronze"
    options = storage_options_for(table, endpoint_url=moto_endpoint)
    writer = foreach_batch_writer(new_engine().table(table, storage_options=options), app_id="q-s3")
    writer(spark.createDataFrame([(1, "a", 1.0)], SCHEMA), 0)
    writer(spark.createDataFrame([(2, "b", 2.0)], SCHEMA), 1)
    writer(spark.createDataFrame([(2, "b", 2.0)], SCHEMA), 1)
    engine = DeltaRsEngine()
    assert engine.table(table, storage_options=options).version() == 1
    assert sorted(r["id"] for r in engine.table(table, storage_options=options).read().to_pylist()) == [1, 2]


@pytest.mark.parametrize("bad_id", [0, 1])
def test_batches_at_or_below_the_committed_id_are_skipped(spark, new_engine, tmp_path, bad_id):
    table = str(tmp_path / "table")
    writer = foreach_batch_writer(new_engine().table(table), app_id="q-order")
    writer(spark.createDataFrame([(1, "a", 1.0)], SCHEMA), 1)
    writer(spark.createDataFrame([(9, "z", 9.0)], SCHEMA), bad_id)
    assert [r["id"] for r in DeltaRsEngine().table(table).read().to_pylist()] == [1]


def test_a_replayed_batch_on_delta_spark_writes_nothing_and_reports_it(spark, tmp_path):
    table = str(tmp_path / "table")
    seen: list[tuple[int, dict]] = []
    writer = foreach_batch_writer(
        JvmDeltaEngine(spark).table(table), app_id="q-replay", timings=lambda b, t: seen.append((b, t))
    )
    batch = spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], SCHEMA)
    writer(batch, 0)
    foreach_batch_writer(JvmDeltaEngine(spark).table(table), app_id="q-replay")(batch, 0)
    writer(batch, 0)
    assert DeltaRsEngine().table(table).version() == 0
    assert DeltaRsEngine().table(table).read().num_rows == 2
    assert [(b, t["rows"], t["committed"]) for b, t in seen] == [(0, 2, True), (0, 0, False)]
