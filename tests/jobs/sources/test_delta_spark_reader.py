"""``read_delta_stream`` on Spark's own Delta reader: its limits hold on every batch, the first after a restart
included (the kit's Python source planned that first batch uncapped: a table of 12 files read with
``max_files_per_trigger=2`` came as one batch)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from jobs.sources import read_delta, read_delta_stream

ROWS_PER_FILE = 100


def _append_files(table: str, files: range) -> None:
    """One commit of one file per number in ``files``; each row says which file it came in."""
    for number in files:
        data = pa.table(
            {
                "file": pa.array([number] * ROWS_PER_FILE, pa.int64()),
                "id": pa.array(range(number * ROWS_PER_FILE, (number + 1) * ROWS_PER_FILE), pa.int64()),
            }
        )
        write_deltalake(table, data, mode="append")


class Drain:
    """A query from ``read_delta_stream`` into one parquet folder per batch, run to the end of the table."""

    def __init__(self, spark, table: str, tmp_path: Path) -> None:
        self.spark, self.table = spark, table
        self.checkpoint = str(tmp_path / "checkpoint")
        self.out = tmp_path / "out"

    def run(self, trigger: str, **options) -> None:
        frame = read_delta_stream(self.spark, self.table, reader="spark", **options)
        writer = frame.writeStream.foreachBatch(self._sink).option("checkpointLocation", self.checkpoint)
        if trigger == "availableNow":
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
        else:
            query = writer.trigger(processingTime="1 second").start()
            try:
                query.processAllAvailable()
            finally:
                query.stop()

    def _sink(self, batch, batch_id: int) -> None:
        batch.select("file", "id").write.mode("overwrite").parquet(str(self.out / f"batch={batch_id:06d}"))

    def files_per_batch(self) -> dict[int, list[int]]:
        """For each batch id, the files its rows came from, and (checked) every file whole in one batch."""
        rows = pq.read_table(str(self.out)).to_pylist()
        found: dict[int, set[int]] = {}
        counts: dict[int, int] = {}
        for row in rows:
            found.setdefault(row["batch"], set()).add(row["file"])
            counts[row["file"]] = counts.get(row["file"], 0) + 1
        assert set(counts.values()) == {ROWS_PER_FILE}
        return {batch: sorted(files) for batch, files in sorted(found.items())}


@pytest.mark.parametrize("restart_trigger", ["availableNow", "processingTime"])
def test_max_files_per_trigger_holds_on_every_batch_and_after_a_restart(spark, tmp_path, restart_trigger):
    table = str(tmp_path / "table")
    _append_files(table, range(12))
    drain = Drain(spark, table, tmp_path)

    drain.run("availableNow", max_files_per_trigger=2)
    first = drain.files_per_batch()
    assert [len(files) for files in first.values()] == [2, 2, 2, 2, 2, 2]
    assert sorted(f for files in first.values() for f in files) == list(range(12))

    # An outage: 12 more files wait; the restart's first batch is capped like every other.
    _append_files(table, range(12, 24))
    drain.run(restart_trigger, max_files_per_trigger=2)
    after = {batch: files for batch, files in drain.files_per_batch().items() if batch not in first}
    assert [len(files) for files in after.values()] == [2, 2, 2, 2, 2, 2]
    assert sorted(f for files in after.values() for f in files) == list(range(12, 24))


def test_max_bytes_per_trigger_caps_at_one_file_when_each_file_is_larger(spark, tmp_path):
    table = str(tmp_path / "table")
    _append_files(table, range(4))
    drain = Drain(spark, table, tmp_path)
    drain.run("availableNow", max_bytes_per_trigger=1)  # smaller than any file: one file per batch
    assert drain.files_per_batch() == {0: [0], 1: [1], 2: [2], 3: [3]}


def test_starting_version_and_the_batch_reader(spark, tmp_path):
    table = str(tmp_path / "table")
    _append_files(table, range(5))  # versions 0..4
    drain = Drain(spark, table, tmp_path)
    drain.run("availableNow", starting_version=3, max_files_per_trigger=1)
    assert drain.files_per_batch() == {0: [3], 1: [4]}
    assert read_delta(spark, table, version=1, reader="spark").count() == 2 * ROWS_PER_FILE
    assert sorted(
        r["file"] for r in read_delta(spark, table, reader="spark").select("file").distinct().collect()
    ) == [
        0,
        1,
        2,
        3,
        4,
    ]
