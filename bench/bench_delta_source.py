"""Benchmark: the Delta readers of jobs.sources.read_delta_stream draining a table vs spark.read.parquet of its files.

The headline is Spark's own Delta reader (``reader="spark"``, what ``auto`` runs wherever Spark has the Delta
jars), whole query against ``spark.read.parquet`` (target >= 0.8). The kit's Python source (``reader="python"``,
kept for tables on the Azurite emulator) is measured beside it for the record; the notes below describe it.

Both read the same files (the table's snapshot) of one local bronze-like Delta table into Spark's noop sink, in
the same run, several repetitions each, alternating which goes first; prints medians, the ratios of rows/s
against the target (>= 0.8) and the load average. Both sides materialise every column: the noop sink consumes
Spark rows (the source's come out of Arrow through an unsafe projection of all columns, the baseline's out of
the vectorized Parquet reader through whole-stage code generation, again all columns). Tasks: the source
plans one per task slot (2 here), the baseline lets Spark split the files (4 here); both run on the same slots.
How each is timed (wall clock, ``time.perf_counter``):
- Spark's Delta reader (the headline, the target's ratio): its whole query, from ``read_delta_stream`` to
  ``stop()``, run right after the Python source in each repetition (its CPU is not split out).
- ratio "whole query" of the Python source (for the record): its whole query, from
  ``read_delta_stream`` (the driver reads the table's metadata) through ``start()`` (Spark starts the source's
  planner, a fresh Python process), the triggers (plan from the log, read every file on the executors, write
  the checkpoint) and ``processAllAvailable()`` to ``stop()``, against the baseline's batch job.
- ratio "inside triggers": the same rows over the time inside the source's triggers only (the sum of Spark's
  ``triggerExecution``), i.e. without the ~1.5-4 s between ``start()`` and the first trigger (the planner
  process starting and importing pyspark, which Spark imports from its ``pyspark.zip``, uncompiled). It still
  includes the first trigger's own start-up work (the first ``latestOffset``: the table's snapshot; Spark
  creating the read function in a planner worker), so it is not a pure steady-state rate either.
- CPU seconds per side (psutil, this process's descendants): the JVM's own, and the Python processes' (the
  planner, the workers; Spark's baseline uses none). They are far steadier than wall time on a busy machine.
- for scale, Spark's own streaming file source over the same files (``spark.readStream.parquet``, noop sink,
  the same checkpointing), timed as the source is: what any streaming query pays to start, with no Python.
The streaming start-up is a fixed cost, so it weighs less on bigger tables (``--files``).
Default: 40 files x 25k rows (1M rows); ``--files/--rows/--reps`` to size it.

    nice -n 10 .venv/bin/python bench/bench_delta_source.py [--files 40 --rows 25000 --reps 3]
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

import psutil
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench._common import load_average_line
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


class CpuClock:
    """CPU seconds used since the last reading by the JVM and by the Python processes under this one."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._last = self._read()

    def _read(self) -> tuple[float, float]:
        jvm = python = 0.0
        for proc in self._me.children(recursive=True):
            try:
                times, is_jvm = proc.cpu_times(), proc.name() == "java"
            except psutil.Error:
                continue
            # The JVM's finished children (the planner of a stopped query) are Python processes.
            reaped = times.children_user + times.children_system
            if is_jvm:
                jvm += times.user + times.system
                python += reaped
            else:
                python += times.user + times.system + reaped
        return jvm, python

    def lap(self) -> tuple[float, float]:
        now = self._read()
        jvm, python = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        return jvm, python


def drain(spark, uri: str, checkpoint: str, reader: str = "python") -> tuple[float, float]:
    """(seconds for the whole query, seconds inside its triggers): the difference is Spark starting a query."""
    started = time.perf_counter()
    df = read_delta_stream(
        spark, uri, max_files_per_trigger=1_000_000, checkpoint_location=checkpoint, reader=reader
    )
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


def print_results(
    args: argparse.Namespace,
    total: int,
    times: dict[str, list[float]],
    more: dict[str, list[float]],
    cpu: dict[str, list[tuple[float, float]]],
) -> None:
    source_times, trigger_times, parquet_times = times["source"], times["triggers"], times["parquet"]
    stream_times, spark_times = more["stream"], more["spark"]
    source_cpu, parquet_cpu = cpu["delta source"], cpu["spark.read.parquet"]
    source_rate = total / statistics.median(source_times)
    trigger_rate = total / statistics.median(trigger_times)
    parquet_rate = total / statistics.median(parquet_times)
    stream_rate = total / statistics.median(stream_times)
    ratio = source_rate / parquet_rate
    spark_rate = total / statistics.median(spark_times)
    spark_ratio = spark_rate / parquet_rate
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
        f"Spark's Delta reader drain:       median {spark_rate:,.0f} rows/s  runs {[round(t, 2) for t in spark_times]} s"
    )
    print(
        f"ratio Spark's Delta reader/parquet (whole query) = {spark_ratio:.2f}  (target >= {TARGET}): "
        f"{'MET' if spark_ratio >= TARGET else 'NOT MET'}"
    )
    print(
        f"ratio Spark's Delta reader/readStream.parquet = {spark_rate / stream_rate:.2f} "
        "(both whole streaming queries: the same start-up, offset and commit logs)"
    )
    print(f"ratio Python source/parquet (whole query) = {ratio:.2f}  (for the record)")
    print(
        f"ratio inside triggers/parquet = {trigger_rate / parquet_rate:.2f} (without Spark's query start-up)"
    )
    print(f"ratio source/readStream.parquet = {source_rate / stream_rate:.2f} (both whole streaming queries)")
    print(
        f"start-up outside the triggers (median): "
        f"{statistics.median(w - t for w, t in zip(source_times, trigger_times, strict=True)):.2f} s"
    )
    for name, laps in (("delta source", source_cpu), ("spark.read.parquet", parquet_cpu)):
        print(
            f"CPU seconds, {name + ':':20s} JVM median {statistics.median(j for j, _ in laps):.2f}, "
            f"Python processes median {statistics.median(p for _, p in laps):.2f}"
        )
    print(load_average_line())


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
        drain(spark, uri, str(root / "ck-warm-spark"), "spark")
        parquet(spark, uri)
        parquet_stream(spark, uri, str(root / "ck-pq-warm"))
        source_times, trigger_times, parquet_times, stream_times = [], [], [], []
        spark_times: list[float] = []
        source_cpu: list[tuple[float, float]] = []
        parquet_cpu: list[tuple[float, float]] = []
        clock = CpuClock()

        def baseline(rep: int) -> None:
            clock.lap()
            parquet_times.append(parquet(spark, uri))
            parquet_cpu.append(clock.lap())
            stream_times.append(parquet_stream(spark, uri, str(root / f"ck-pq-{rep}")))

        for rep in range(args.reps):
            if rep % 2 == 1:
                baseline(rep)
            clock.lap()
            whole, in_triggers = drain(spark, uri, str(root / f"ck-{rep}"))
            source_cpu.append(clock.lap())
            source_times.append(whole)
            trigger_times.append(in_triggers)
            spark_times.append(drain(spark, uri, str(root / f"ck-spark-{rep}"), "spark")[0])
            if rep % 2 == 0:
                baseline(rep)
    print_results(
        args,
        total,
        {"source": source_times, "triggers": trigger_times, "parquet": parquet_times},
        {"stream": stream_times, "spark": spark_times},
        {"delta source": source_cpu, "spark.read.parquet": parquet_cpu},
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
