"""Benchmark: the lake engines on the same batches, in one run: delta-spark (the batch DataFrame written by the
executors, what every Spark job writes with) against the old driver-side path (the batch to Arrow on the driver,
written by delta-rs in the driver's Python process).

Prints medians and the delta-spark / delta-rs ratio for: appends (rows/s through ``foreach_batch_writer``), a
MERGE of 10% updates into a table of ``--table-rows``, OPTIMIZE + ZORDER BY of a table of small files; then the
driver's peak memory (the Python driver and its JVM, resident) while appending one batch of ``--rows`` and one of
10x that: flat for delta-spark, growing with the batch for delta-rs. Defaults take a few minutes on 2 cores;
``--full`` is the issue's size (1M-row batches and table).

    .venv/bin/python bench/bench_lake_engines.py [--full] [--master 'local-cluster[2,1,1024]']
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import PeakRss
from jobs.lake import DeltaRsEngine, JvmDeltaEngine, LakeEngine, foreach_batch_writer
from jobs.session import build_session


def events(spark, rows: int, *, offset: int = 0):
    return spark.range(offset, offset + rows).selectExpr(
        "id",
        "concat('product-', cast(id % 1000 as string)) as product",
        "cast(id % 9973 as double) / 7.0 as amount",
        "timestamp_seconds(1767225600 + id) as event_time",
    )


def median_ratio(name: str, unit: str, jvm: list[float], rs: list[float]) -> None:
    a, b = statistics.median(jvm), statistics.median(rs)
    print(f"{name:<28} delta-spark {a:>12,.1f} {unit}   delta-rs {b:>12,.1f} {unit}   ratio {a / b:.2f}")


def driver_role(process: psutil.Process, me: psutil.Process) -> str | None:
    """This process ("python") and the driver JVM ("jvm"), for :class:`bench._common.PeakRss`."""
    if process.pid == me.pid:
        return "python"
    return "jvm" if "java" in process.name() else None


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per appended batch")
    parser.add_argument("--batches", type=int, default=4, help="batches per append run")
    parser.add_argument("--table-rows", type=int, default=200_000, help="rows of the MERGE target")
    parser.add_argument("--small-files", type=int, default=16, help="files OPTIMIZE + ZORDER packs")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--master", default=None, help="Spark master (default: local[2])")
    parser.add_argument("--full", action="store_true", help="1M-row batches and MERGE target")
    args = parser.parse_args()
    rows = 1_000_000 if args.full else args.rows
    table_rows = 1_000_000 if args.full else args.table_rows

    spark = build_session("bench-lake-engines", master=args.master)
    engines: dict[str, Callable[[], LakeEngine]] = {
        "delta-spark": lambda: JvmDeltaEngine(spark),
        "delta-rs": DeltaRsEngine,
    }
    batch = events(spark, rows).cache()
    batch.count()
    print(f"master {spark.sparkContext.master}; {rows:,} rows per batch, {args.reps} repetitions (median)")
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as scratch:
        root = Path(scratch)
        for name, make in engines.items():  # warm-up: JIT, Python workers, Arrow, Delta's first snapshot
            foreach_batch_writer(make().table(str(root / f"warm-{name}")), app_id="warm")(batch, 0)

        appends: dict[str, list[float]] = {name: [] for name in engines}
        merges: dict[str, list[float]] = {name: [] for name in engines}
        optimizes: dict[str, list[float]] = {name: [] for name in engines}
        updates = pa.table(
            {
                "id": pa.array(range(0, table_rows, 10), pa.int64()),
                "product": [f"updated-{i}" for i in range(0, table_rows, 10)],
            }
        )
        for rep in range(args.reps):
            order = list(engines) if rep % 2 == 0 else list(reversed(engines))
            for name in order:
                table = engines[name]().table(str(root / f"append-{name}-{rep}"))
                writer = foreach_batch_writer(table, app_id="bench")
                seconds = timed(lambda w=writer: [w(batch, b) for b in range(args.batches)])
                appends[name].append(rows * args.batches / seconds)

                target = engines[name]().table(str(root / f"merge-{name}-{rep}"))
                base = events(spark, table_rows).select("id", "product")
                foreach_batch_writer(target, app_id="load")(base, 0)
                merges[name].append(timed(lambda t=target: t.merge(updates, keys=["id"], precombine="id")))

                packed = engines[name]().table(str(root / f"optimize-{name}-{rep}"))
                small = foreach_batch_writer(packed, app_id="small")
                for number in range(args.small_files):
                    small(events(spark, 5_000, offset=number * 5_000).coalesce(1), number)
                optimizes[name].append(timed(lambda t=packed: t.compact(z_order_by=["product"])))
        median_ratio("append", "rows/s", appends["delta-spark"], appends["delta-rs"])
        median_ratio(f"MERGE 10% of {table_rows:,}", "s", merges["delta-spark"], merges["delta-rs"])
        median_ratio(
            f"OPTIMIZE+ZORDER {args.small_files} files", "s", optimizes["delta-spark"], optimizes["delta-rs"]
        )

        print("driver peak RSS while appending one batch (MiB: Python driver / driver JVM):")
        for size in (rows, rows * 10):
            big = events(spark, size)
            line = [f"  {size:>12,} rows"]
            for name, make in engines.items():
                table = make().table(str(root / f"rss-{name}-{size}"))
                with PeakRss(role=driver_role, interval_s=0.02) as peak:
                    foreach_batch_writer(table, app_id="rss")(big, 0)
                line.append(
                    f"{name} {peak.peaks.get('python', 0) / 2**20:,.0f} / {peak.peaks.get('jvm', 0) / 2**20:,.0f}"
                )
            print("   ".join(line))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
