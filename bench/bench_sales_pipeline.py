"""Benchmark: the sales pipeline (bronze -> silver + quarantine + gold) vs the Delta source draining the same bronze.

One local bronze table of generated sales events (0.5% malformed, 2% duplicates, as the Locust scenario sends
them) is read by both in the same run: the sales job with ``--trigger available-now`` (classification in
Spark, delta-spark writes: per micro-batch a silver commit, a quarantine commit and a gold MERGE when the batch has
rows for them, plus the metrics file),
and a bare drain of the source into Spark's noop sink (the baseline: what reading alone costs). Prints
rows/s of each, their ratio (no target: it is the price of the pipeline's work), and the peak RSS of the
job's process tree (driver Python + JVM + Python workers).

    .venv/bin/python bench/bench_sales_pipeline.py [--events 200000 --files 20 --reps 2]

With ``--old-vs-new`` (instead of the above; issue 27) the sales job as it was at 1e4b57a (old: every micro-batch
collected to the driver as Arrow, routed and written by delta-rs in the driver's Python, bronze read by the
Python Delta source, ``--delta-reader python``) against the working tree's (new: dedup in Spark state, silver,
quarantine and gold written by delta-spark on the executors), each a child ``python -m jobs sales`` under
``local-cluster[1,2,1024]`` (the old code through a shim giving its build_session that master: its entry has
no --spark-master). One bronze table of ``--ovn-files`` files of ``--ovn-rows-per-file`` rows is drained with
``--trigger available-now`` at ``--ovn-files-per-batch`` files per micro-batch (1x) and ten times that (10x).
Prints rows/s (bronze rows over the drain: first offsets file to last commit file in the checkpoint), the peak
RSS of the driver (the job's Python + driver JVM) and of the executors (executor JVM + its Python workers),
new/old rows/s and each path's driver peak 10x/1x; exits 1 when the silver row counts differ.

    .venv/bin/python bench/bench_sales_pipeline.py --old-vs-new [--quick]

Without git or commit 1e4b57a (e.g. a shallow clone) it says so and runs the new path alone (exit 0). Both paths
run with this venv: the old code runs as it was, no change but the master.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
from deltalake import write_deltalake

from bench._common import (
    PeakRss,
    add_old_vs_new_arguments,
    delta_rows,
    load_average_line,
    old_vs_new,
    old_vs_new_sizes,
)
from jobs.ingest import bronze_schema
from jobs.pipelines import sales
from jobs.pipelines._job import JobSettings
from jobs.session import build_session
from jobs.sources import read_delta_stream
from loadtest.generators import make_generator

print = functools.partial(print, flush=True)


def build_bronze(uri: str, events: int, files: int) -> int:
    generator = make_generator("sales", seed=7, malformed_rate=0.005, duplicate_rate=0.02)
    per_file = events // files
    now = datetime.now(UTC)
    sequence = 0
    for f in range(files):
        batch = [generator.next_event() for _ in range(per_file)]
        sequences = [str(sequence + i) for i in range(len(batch))]
        sequence += len(batch)
        table = pa.Table.from_arrays(
            [
                pa.array([e.data for e in batch], pa.binary()),
                pa.array([e.partition_key for e in batch]),
                pa.array(["shardId-000000000000"] * len(batch)),
                pa.array(sequences),
                pa.array([now] * len(batch), pa.timestamp("us", tz="UTC")),
                pa.array([now] * len(batch), pa.timestamp("us", tz="UTC")),
                pa.array([f] * len(batch), pa.int64()),
            ],
            schema=bronze_schema(),
        )
        write_deltalake(uri, table, mode="append")
    return per_file * files


def run_pipeline(spark, bronze: str, root: Path, files_per_batch: int) -> float:
    job = JobSettings(
        source_table=bronze,
        lake=str(root / "lake"),
        checkpoint=str(root / "checkpoint"),
        trigger="available-now",
    )
    settings = sales.SalesSettings(job=job, max_files_per_trigger=files_per_batch)
    started = time.perf_counter()
    sales.run(settings, spark=spark)
    return time.perf_counter() - started


def drain(spark, bronze: str, checkpoint: str, files_per_batch: int) -> float:
    started = time.perf_counter()
    df = read_delta_stream(
        spark, bronze, max_files_per_trigger=files_per_batch, checkpoint_location=checkpoint
    )
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=20, help="bronze files (one per ingest micro-batch)")
    parser.add_argument("--files-per-batch", type=int, default=5)
    parser.add_argument("--reps", type=int, default=2)
    add_old_vs_new_arguments(parser, files=100, rows_per_file=1_000, files_per_batch=10, unit="rows")
    args = parser.parse_args()
    if args.old_vs_new:
        return compare_old_new(args)

    spark = build_session("bench-sales")
    with tempfile.TemporaryDirectory(prefix="bench-sales-") as scratch:
        root = Path(scratch)
        bronze = str(root / "bronze")
        rows = build_bronze(bronze, args.events, args.files)
        drain(spark, bronze, str(root / "warm"), args.files_per_batch)  # Python workers, JIT
        pipeline_times, drain_times = [], []
        with PeakRss() as rss:
            for rep in range(args.reps):
                pipeline_times.append(run_pipeline(spark, bronze, root / f"run-{rep}", args.files_per_batch))
                drain_times.append(drain(spark, bronze, str(root / f"drain-{rep}"), args.files_per_batch))
    pipeline_rate = rows / statistics.median(pipeline_times)
    drain_rate = rows / statistics.median(drain_times)
    print(f"bronze rows={rows:,} files={args.files} files/batch={args.files_per_batch} reps={args.reps}")
    print(
        f"sales pipeline (silver+quarantine+gold): median {pipeline_rate:,.0f} rows/s  runs {[round(t, 2) for t in pipeline_times]} s"
    )
    print(
        f"delta source drain to noop (baseline):   median {drain_rate:,.0f} rows/s  runs {[round(t, 2) for t in drain_times]} s"
    )
    print(
        f"ratio pipeline/drain = {pipeline_rate / drain_rate:.2f} (no target: the cost of classifying, routing, writing)"
    )
    print(f"peak RSS of the job's process tree: {rss.peak / 2**30:.2f} GiB")
    print(load_average_line())
    spark.stop()
    return 0


def compare_old_new(args: argparse.Namespace) -> int:
    """The old-vs-new section (``--old-vs-new``): see the module's docstring."""
    files, per_file, per_batch = old_vs_new_sizes(args)
    with tempfile.TemporaryDirectory(prefix="bench-sales-ovn-") as scratch:
        root = Path(scratch)
        bronze = str(root / "bronze")
        rows = build_bronze(bronze, files * per_file, files)
        print(f"bronze: {rows:,} sales events in {files} files of {per_file:,} rows")
        status = old_vs_new(
            "sales",
            root=root,
            rows=rows,
            bronze=bronze,
            files_per_batch=per_batch,
            output=("silver rows", lambda lake: delta_rows(lake / sales.SILVER), None),
        )
    print(load_average_line())
    return status


if __name__ == "__main__":
    raise SystemExit(main())
