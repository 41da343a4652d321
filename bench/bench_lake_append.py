"""Benchmark: lake append (foreachBatch -> toArrow -> delta-rs, one commit per batch) vs Spark's Parquet writer.

Both write the same cached Spark micro-batches in the same run; the ratio of their rows/s is printed
against the target (>= 0.8). Default: 10 batches x 100k rows, 5 repetitions (one to two minutes on 2 cores).
Full size: ``--full`` (10 batches x 1M rows) or set the sizes with ``--batches/--rows/--reps``.

    .venv/bin/python bench/bench_lake_append.py [--full]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.lake import DeltaRsEngine, foreach_batch_writer
from jobs.session import build_session

TARGET = 0.8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per micro-batch")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--full", action="store_true", help="10 batches x 1M rows")
    args = parser.parse_args()
    rows = 1_000_000 if args.full else args.rows

    spark = build_session("bench-lake-append")
    # An events-like batch: ids, a short string, a double, a UTC timestamp and a date for partition-free writes.
    batch = spark.range(rows).selectExpr(
        "id",
        "concat('product-', cast(id % 1000 as string)) as product",
        "cast(id % 9973 as double) / 7.0 as amount",
        "timestamp_seconds(1767225600 + id) as event_time",
        "uuid() as event_id",
    )
    batch = batch.cache()
    batch.count()  # materialise once so both writers start from the same in-memory batch

    with tempfile.TemporaryDirectory(prefix="bench-lake-") as scratch:
        root = Path(scratch)

        def lake_run(rep: int) -> float:
            writer = foreach_batch_writer(
                DeltaRsEngine().table(str(root / f"delta-{rep}")), app_id=f"bench-{rep}"
            )
            started = time.perf_counter()
            for batch_id in range(args.batches):
                writer(batch, batch_id)
            return time.perf_counter() - started

        def parquet_run(rep: int) -> float:
            target = str(root / f"parquet-{rep}")
            started = time.perf_counter()
            for _ in range(args.batches):
                batch.write.mode("append").parquet(target)
            return time.perf_counter() - started

        # Warm-up: JIT, Python workers, Arrow and delta-rs initialisation are not what we measure.
        foreach_batch_writer(DeltaRsEngine().table(str(root / "warm-delta")), app_id="warm")(batch, 0)
        batch.write.mode("append").parquet(str(root / "warm-parquet"))

        lake_times, parquet_times = [], []
        for rep in range(args.reps):
            # Alternate the order so neither writer always runs on a warmer machine.
            if rep % 2 == 0:
                lake_times.append(lake_run(rep))
                parquet_times.append(parquet_run(rep))
            else:
                parquet_times.append(parquet_run(rep))
                lake_times.append(lake_run(rep))

    total = args.batches * rows
    lake_rate = total / statistics.median(lake_times)
    parquet_rate = total / statistics.median(parquet_times)
    ratio = lake_rate / parquet_rate
    print(f"batches={args.batches} rows/batch={rows} reps={args.reps}")
    print(
        f"lake append (toArrow + delta-rs, 1 commit/batch): median {lake_rate:,.0f} rows/s  "
        f"runs {[round(t, 2) for t in lake_times]} s"
    )
    print(
        f"spark parquet writer (baseline):                median {parquet_rate:,.0f} rows/s  "
        f"runs {[round(t, 2) for t in parquet_times]} s"
    )
    print(
        f"ratio lake/parquet = {ratio:.2f}  (target >= {TARGET}): {'MET' if ratio >= TARGET else 'NOT MET'}"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
