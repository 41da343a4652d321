"""The Delta source end to end in Spark: snapshot then commits, caps, restarts, crashes, change commits."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.lake import DeltaRsEngine, foreach_batch_writer, storage_options_for
from jobs.sources import DeltaTableNotFoundError, SourceSettingsError
from jobs.sources import read_delta as _read_delta
from jobs.sources import read_delta_stream as _read_delta_stream
from jobs.sources.delta import task_slots


# This file tests the kit's Python Delta source; every local session now also has Spark's own (the pinned jars),
# which `auto` would pick.
def read_delta_stream(*args, **kwargs):
    return _read_delta_stream(*args, reader="python", **kwargs)


def read_delta(*args, **kwargs):
    return _read_delta(*args, reader="python", **kwargs)


def _append(table: str, ids: range, *, options: dict | None = None, **kwargs) -> None:
    data = pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"n{i}" for i in ids]})
    write_deltalake(table, data, mode="append", storage_options=options, **kwargs)


def _parquet_sink(out: Path):
    """One parquet folder per batch, overwritten on a replay (idempotent on the batch id)."""

    def sink(batch, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id:06d}"))

    return sink


def _rows(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return sorted(pq.read_table(str(out)).to_pylist(), key=lambda r: (r["batch"], r["id"]))


@pytest.mark.parametrize(
    ("master", "default_parallelism", "cpus", "expected"),
    [
        ("local[2]", 4, 8, 2),  # the thread count, not spark.default.parallelism
        ("local[*]", 4, 8, 8),
        ("local[*]", 4, None, 1),
        ("local", 4, 8, 1),
        ("local[3, 2]", 4, 8, 3),  # local[N, maxFailures]
        ("yarn", 16, 8, 16),
        ("spark://host:7077", 0, 8, 1),
    ],
)
def test_one_task_per_slot(master, default_parallelism, cpus, expected):
    assert task_slots(master, default_parallelism, cpus) == expected


def test_planning_a_snapshot_leaves_pandas_unimported(tmp_path):
    """The planner is a fresh process per query: importing pandas there cost ~0.35 CPU-s of its start-up."""
    table = str(tmp_path / "table")
    _append(table, range(3))
    _append(table, range(3, 5))
    script = textwrap.dedent(
        f"""
        import sys
        from jobs.sources._delta_log import DeltaHistory
        history = DeltaHistory({table!r}, {{}})
        entries = history.snapshot(history.latest_version())
        print([(e.version, e.size > 0) for e in entries], "pandas" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert out == "[(1, True), (1, True)] False"


class Stream:
    """A query from the Delta source into per-batch parquet folders, drained with processAllAvailable."""

    def __init__(self, spark, table: str, tmp_path: Path, **options) -> None:
        self.spark, self.table, self.options = spark, table, options
        self.checkpoint = str(tmp_path / "checkpoint")
        self.out = tmp_path / "out"

    def drain(self) -> None:
        df = read_delta_stream(self.spark, self.table, checkpoint_location=self.checkpoint, **self.options)
        query = (
            df.writeStream.foreachBatch(_parquet_sink(self.out))
            .option("checkpointLocation", self.checkpoint)
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    def ids(self) -> list[int]:
        return sorted(r["id"] for r in _rows(self.out))

    def per_batch(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {}
        for row in _rows(self.out):
            found.setdefault(row["batch"], []).append(row["id"])
        return found


def test_snapshot_then_commits_once_each_with_caps_restarts_and_compaction(spark, tmp_path):
    table = str(tmp_path / "table")
    for start in range(0, 50, 10):
        _append(table, range(start, start + 10))  # versions 0..4, one file each
    stream = Stream(spark, table, tmp_path, max_files_per_trigger=2)
    stream.drain()
    # The snapshot (5 files) in batches of at most 2 files, every row once.
    assert {b: len(ids) for b, ids in stream.per_batch().items()} == {0: 20, 1: 20, 2: 10}
    assert stream.ids() == list(range(50))
    rows = _rows(stream.out)
    assert {r["_commit_version"] for r in rows} == {4}  # snapshot rows carry the snapshot's version
    assert rows[0]["_commit_timestamp"] is not None

    # Compaction rewrites files without changing rows: passed over. New appends land once; restarts add nothing.
    DeltaTable(table).optimize.compact()
    _append(table, range(50, 53))
    stream.drain()
    stream.drain()
    assert stream.ids() == list(range(53))
    assert sorted({r["_commit_version"] for r in _rows(stream.out) if r["id"] >= 50}) == [6]

    # A batch read of the table, now and at an older version, through the same code.
    assert sorted(r["id"] for r in read_delta(spark, table).collect()) == list(range(53))
    assert read_delta(spark, table, version=1).count() == 20
    assert read_delta(spark, table).columns == ["id", "name"]


def test_crash_between_sink_and_checkpoint_replays_exactly_the_same_files(spark, tmp_path):
    table = str(tmp_path / "table")
    for start in range(0, 40, 10):
        _append(table, range(start, start + 10))
    stream = Stream(spark, table, tmp_path, max_files_per_trigger=1, starting_version=0)
    stream.drain()
    last = max(int(p.name) for p in (Path(stream.checkpoint) / "commits").iterdir() if p.name.isdigit())
    (Path(stream.checkpoint) / "commits" / str(last)).unlink()
    (Path(stream.checkpoint) / "commits" / f".{last}.crc").unlink(missing_ok=True)
    first = pq.read_table(str(stream.out / f"batch={last:06d}")).to_pylist()
    _append(table, range(40, 45))
    stream.drain()
    replayed = pq.read_table(str(stream.out / f"batch={last:06d}")).to_pylist()
    assert sorted(r["id"] for r in replayed) == sorted(r["id"] for r in first) == list(range(30, 40))
    assert stream.ids() == list(range(45))


def test_without_the_checkpoint_location_the_first_batch_after_a_restart_is_uncapped_but_exact(
    spark, tmp_path
):
    table = str(tmp_path / "table")
    for start in range(0, 30, 10):
        _append(table, range(start, start + 10))
    checkpoint, out = str(tmp_path / "checkpoint"), tmp_path / "out"

    def drain() -> None:
        df = read_delta_stream(spark, table, max_files_per_trigger=1)
        query = (
            df.writeStream.foreachBatch(_parquet_sink(out)).option("checkpointLocation", checkpoint).start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    drain()
    for start in range(30, 60, 10):
        _append(table, range(start, start + 10))
    drain()
    batches: dict[int, int] = {}
    for row in _rows(out):
        batches[row["batch"]] = batches.get(row["batch"], 0) + 1
    assert sorted(r["id"] for r in _rows(out)) == list(range(60))
    assert list(batches.values()) == [30, 30]  # each start-up's first batch: everything up to the latest


def test_change_commits_fail_or_are_skipped_or_read_as_the_change_feed(spark, tmp_path):
    table = str(tmp_path / "table")
    _append(table, range(0, 5), configuration={"delta.enableChangeDataFeed": "true"})
    _append(table, range(5, 10))
    DeltaTable(table).delete("id < 3")  # version 2
    _append(table, range(10, 12))

    plain = Stream(spark, table, tmp_path / "plain", starting_version=0)
    with pytest.raises(Exception) as raised:
        plain.drain()
    message = str(raised.value)
    assert f"Delta table {table} version 2 (DELETE) removes or rewrites data" in message
    assert "skip_change_commits=True" in message and "read_change_feed=True" in message

    skipping = Stream(spark, table, tmp_path / "skip", starting_version=0, skip_change_commits=True)
    skipping.drain()
    assert skipping.ids() == list(range(12))

    feed = Stream(spark, table, tmp_path / "feed", starting_version=0, read_change_feed=True)
    feed.drain()
    changes = sorted((r["_commit_version"], r["_change_type"], r["id"]) for r in _rows(feed.out))
    assert changes == [
        *[(0, "insert", i) for i in range(5)],
        *[(1, "insert", i) for i in range(5, 10)],
        *[(2, "delete", i) for i in range(3)],
        *[(3, "insert", i) for i in range(10, 12)],
    ]


def test_a_vacuumed_file_fails_naming_it(spark, tmp_path):
    table = str(tmp_path / "table")
    _append(table, range(0, 5))
    _append(table, range(5, 10))
    (first,) = [Path(uri).name for uri in DeltaTable(table, version=0).file_uris()]
    (second,) = {Path(uri).name for uri in DeltaTable(table, version=1).file_uris()} - {first}
    DeltaTable(table).optimize.compact()
    DeltaTable(table).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert not (Path(table) / first).exists() and not (Path(table) / second).exists()
    stream = Stream(spark, table, tmp_path, starting_version=0)
    with pytest.raises(Exception) as raised:
        stream.drain()
    named = re.search(
        rf"Delta table {re.escape(table)} version (\d) names data file (\S+), which", str(raised.value)
    )
    assert named is not None
    assert (named.group(1), named.group(2)) in {("0", first), ("1", second)}
    assert "it was vacuumed (or deleted) before this query read it" in str(raised.value)


def test_starting_positions_and_bad_options(spark, tmp_path):
    table = str(tmp_path / "table")
    _append(table, range(0, 3))
    middle = datetime.now(UTC)
    time.sleep(0.01)  # the next commit's timestamp (ms) must be after `middle`
    _append(table, range(3, 6))

    at_time = Stream(spark, table, tmp_path / "ts", starting_timestamp=middle)
    at_time.drain()
    assert at_time.ids() == [3, 4, 5]

    latest = Stream(spark, table, tmp_path / "latest", starting_version="latest")
    latest.drain()
    assert latest.ids() == []
    _append(table, range(6, 8))
    latest.drain()
    assert latest.ids() == [6, 7]

    with pytest.raises(SourceSettingsError, match="between 0 and its latest, 2, found 7"):
        read_delta_stream(spark, table, starting_version=7)
    with pytest.raises(SourceSettingsError, match="not both"):
        read_delta_stream(spark, table, starting_version=0, starting_timestamp=middle)
    with pytest.raises(DeltaTableNotFoundError, match=f"expected a Delta table at {tmp_path}/nothing"):
        read_delta_stream(spark, str(tmp_path / "nothing"))


def test_partitioned_table_on_the_emulators_s3(spark, moto_endpoint, unique_name):
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=unique_name)
    table = f"s3://{unique_name}/lake/parts"
    options = storage_options_for(table, endpoint_url=moto_endpoint, region="us-east-1")
    data = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "day": pa.array([datetime(2026, 1, d, tzinfo=UTC).date() for d in (1, 1, 2)]),
            "kind": ["a b", "c/d", "a b"],
        }
    )
    write_deltalake(table, data, partition_by=["day", "kind"], storage_options=options)
    rows = read_delta(spark, table, storage_options=options).collect()
    assert sorted((r["id"], r["day"].isoformat(), r["kind"]) for r in rows) == [
        (1, "2026-01-01", "a b"),
        (2, "2026-01-01", "c/d"),
        (3, "2026-01-02", "a b"),
    ]


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from jobs.lake import DeltaRsEngine, foreach_batch_writer
    from jobs.session import build_session
    from jobs.sources import read_delta_stream

    source, target, checkpoint, marker = sys.argv[1:5]
    spark = build_session("delta-kill-child")
    write = foreach_batch_writer(DeltaRsEngine().table(target), app_id="kill-test")

    def sink(batch, batch_id):
        if batch_id == 2:
            Path(marker).write_text("in batch 2")
            time.sleep(300)  # killed here, part-way through the batch
        write(batch.drop("_commit_version", "_commit_timestamp"), batch_id)

    df = read_delta_stream(
        spark, source, max_files_per_trigger=1, checkpoint_location=checkpoint, reader="python"
    )
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    query.awaitTermination(300)
    """
)


def test_killed_mid_batch_then_restarted_lands_every_row_once(spark, tmp_path, killable_child):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    checkpoint, marker = str(tmp_path / "checkpoint"), tmp_path / "marker"
    for start in range(0, 50, 10):
        _append(source, range(start, start + 10))
    child = killable_child(_CHILD, source, target, checkpoint, str(marker))
    try:
        child.wait_until(marker.exists, "reached batch 2", timeout=240)
    finally:
        child.kill()
    landed = [r["id"] for r in DeltaTable(target).to_pyarrow_table().to_pylist()]
    assert (
        len(landed) == len(set(landed)) == 20
    )  # batches 0 and 1, one 10-row file each; batch 2 never committed

    write = foreach_batch_writer(DeltaRsEngine().table(target), app_id="kill-test")
    df = read_delta_stream(spark, source, max_files_per_trigger=1, checkpoint_location=checkpoint)
    query = (
        df.writeStream.foreachBatch(lambda b, i: write(b.drop("_commit_version", "_commit_timestamp"), i))
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    ids = [r["id"] for r in DeltaTable(target).to_pyarrow_table().to_pylist()]
    assert sorted(ids) == list(range(50))
    batch_ids = [c.batch_id for c in DeltaRsEngine().table(target).commits() if c.batch_id is not None]
    assert batch_ids == [0, 1, 2, 3, 4]
