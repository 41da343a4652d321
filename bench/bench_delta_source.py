"""Benchmark: the Delta source (jobs.sources.read_delta_stream) draining a table vs spark.read.parquet of its files.

Both read the same files of one local bronze-like Delta table into Spark's noop sink, in the same run, several
repetitions each, alternating which goes first; prints medians and the ratio of rows/s against the target
(>= 0.8). How each is timed (wall clock, ``time.perf_counter``):
- the source: the whole query, from ``read_delta_stream`` (the driver reads the table's metadata) through
  ``start()`` (Spark starts the source's Python planner process), the triggers (plan from the log, read every
  file on the executors, write the checkpoint) and ``processAllAvailable()`` to ``stop()``; also printed: the
  same rows over the time inside its triggers only (Spark's ``triggerExecution``), without the start-up.
- the baseline: ``spark.read.parquet(<the table's files>)`` written to the noop sink, one batch job.
- for scale, Spark's own streaming file source over the same files (``spark.readStream.parquet``, noop sink,
  the same checkpointing), timed as the source is: what any streaming query pays to start, with no Python.
The first is the target's ratio; the streaming start-up is a fixed cost, so it weighs less on bigger tables.
Default: 40 files x 25k rows (1M rows); ``--files/--rows/--reps`` to size it.

    .venv/bin/python bench/bench_delta_source.py [--files 40 --rows 25000 --reps 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from jobs.ingest import bronze_schema
from jobs.session import build_session
from jobs.sources import read_delta_stream

TARGET = 0.8
print = functools.partial(print, flush=True)


def build_table(uri: str, files: int, rows: int) -> int:
    """A bronze-like table: JSON payload bytes, position strings, timestamps; one file per append."""
    now = datetime.now(UTC)
    for f in range(files):
        start = f * rows
        payloads = [
            b'{"event_id":"%012d","event_type":"sales","SalesId":%d,"ProductName":"Helmet","SalesAmount":12.34}'
            % (i, i)
            for i in range(start, start + rows)
        ]
        table = pa.Table.from_arrays(
            [
                pa.array(payloads, pa.binary()),
                pa.array([f"k{i % 97}" for i in range(start, start + rows)]),
                pa.array([f"shardId-00000000000{i % 4}" for i in range(start, start + rows)]),
                pa.array([str(i) for i in range(start, start + rows)]),
                pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                pa.array([f] * rows, pa.int64()),
            ],
            schema=bronze_schema(),
        )
        write_deltalake(uri, table, mode="append")
    return files * rows


def drain(spark, uri: str, checkpoint: str) -> tuple[float, float]:
    """(seconds for the whole query, seconds inside its triggers): the difference is Spark starting a query."""
    started = time.perf_counter()
    df = read_delta_stream(spark, uri, max_files_per_trigger=1_000_000, checkpoint_location=checkpoint)
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    elapsed = time.perf_counter() - started
    in_triggers = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress) / 1000
    return elapsed, in_triggers


def parquet_stream(spark, uri: str, checkpoint: str) -> float:
    """Spark's own file source draining the same files as a stream (the table's _delta_log is skipped)."""
    started = time.perf_counter()
    schema = spark.read.parquet(*DeltaTable(uri).file_uris()).schema
    df = spark.readStream.schema(schema).parquet(uri)
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return time.perf_counter() - started


def parquet(spark, uri: str) -> float:
    started = time.perf_counter()
    spark.read.parquet(*DeltaTable(uri).file_uris()).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=25_000, help="rows per file")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    spark = build_session("bench-delta-source")
    with tempfile.TemporaryDirectory(prefix="bench-delta-") as scratch:
        root = Path(scratch)
        uri = str(root / "bronze")
        total = build_table(uri, args.files, args.rows)
        # Warm-up: JIT, Python workers and the first planner process are not what is measured.
        drain(spark, uri, str(root / "ck-warm"))
        parquet(spark, uri)
        parquet_stream(spark, uri, str(root / "ck-pq-warm"))
        source_times, trigger_times, parquet_times, stream_times = [], [], [], []
        for rep in range(args.reps):
            if rep % 2 == 1:
                parquet_times.append(parquet(spark, uri))
                stream_times.append(parquet_stream(spark, uri, str(root / f"ck-pq-{rep}")))
            whole, in_triggers = drain(spark, uri, str(root / f"ck-{rep}"))
            source_times.append(whole)
            trigger_times.append(in_triggers)
            if rep % 2 == 0:
                parquet_times.append(parquet(spark, uri))
                stream_times.append(parquet_stream(spark, uri, str(root / f"ck-pq-{rep}")))
    source_rate = total / statistics.median(source_times)
    trigger_rate = total / statistics.median(trigger_times)
    parquet_rate = total / statistics.median(parquet_times)
    stream_rate = total / statistics.median(stream_times)
    ratio = source_rate / parquet_rate
    print(f"files={args.files} rows/file={args.rows} rows={total:,} reps={args.reps}")
    print(
        f"delta source drain (noop sink):   median {source_rate:,.0f} rows/s  runs {[round(t, 2) for t in source_times]} s"
    )
    print(
        f"  the same, inside its triggers:  median {trigger_rate:,.0f} rows/s  runs {[round(t, 2) for t in trigger_times]} s"
    )
    print(
        f"spark.read.parquet (baseline):    median {parquet_rate:,.0f} rows/s  runs {[round(t, 2) for t in parquet_times]} s"
    )
    print(
        f"spark.readStream.parquet (scale): median {stream_rate:,.0f} rows/s  runs {[round(t, 2) for t in stream_times]} s"
    )
    print(
        f"ratio source/parquet = {ratio:.2f}  (target >= {TARGET}): {'MET' if ratio >= TARGET else 'NOT MET'}"
    )
    print(
        f"ratio inside triggers/parquet = {trigger_rate / parquet_rate:.2f} (without Spark's query start-up)"
    )
    print(f"ratio source/readStream.parquet = {source_rate / stream_rate:.2f} (both whole streaming queries)")
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
