"""Benchmark: the fraud job (stateful, 10k accounts) vs the same bronze -> silver without state or model.

Both read the same bronze Delta table (transactions from the scenario's generator over 10,000 accounts) in the
same run, several repetitions each, from a fresh checkpoint every time; prints median rows/s of each, their
ratio (target >= 0.5: keeping per-account state and scoring at most halves the throughput), the state store's
size after the run (rows, bytes on disk in the checkpoint, RocksDB SST bytes) and the peak RSS summed over
the process tree (driver Python + JVM + Python workers).

    .venv/bin/python bench/bench_fraud.py                   # 200k transactions
    .venv/bin/python bench/bench_fraud.py --events 50000 --repetitions 1   # a quick look

With ``--old-vs-new`` (instead of the above; issue 27) the fraud job as it was at 1e4b57a (old: every
micro-batch collected to the driver as Arrow, scored and written by delta-rs in the driver's Python, bronze read
by the Python Delta source, ``--delta-reader python``) against the working tree's (new: scored by a pandas UDF /
mapInPandas and written by delta-spark on the executors), each a child ``python -m jobs fraud`` under
``local-cluster[1,2,1024]`` (the old code through a shim giving its build_session that master: its entry has
no --spark-master). One bronze table of ``--ovn-files`` commits of ``--ovn-rows-per-file`` transactions is
drained with ``--trigger available-now`` at ``--ovn-files-per-batch`` files per micro-batch (1x) and ten times
that (10x). Prints rows/s (bronze rows over the drain: first offsets file to last commit file in the
checkpoint), the peak RSS of the driver (the job's Python + driver JVM) and of the executors (executor JVM +
its Python workers), new/old rows/s and each path's driver peak 10x/1x; exits 1 unless every run's silver
``transactions`` holds every transaction.

    .venv/bin/python bench/bench_fraud.py --old-vs-new [--quick]

Its defaults (30 files of 500 rows, 3 files at 1x) are smaller than the sales and orders benches' (100 of 1,000,
10 at 1x): the old fraud job took 40-50 s per 10,000-row micro-batch on the 2-core build machine, so 100,000
rows would not drain in the ~8 minutes a bench is given.

Without git or commit 1e4b57a (e.g. a shallow clone) it says so and runs the new path alone (exit 0). Both paths
run with this venv: the old code runs as it was, no change but the master.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from bench._common import (
    PeakRss,
    add_old_vs_new_arguments,
    delta_rows,
    load_average_line,
    old_vs_new,
    old_vs_new_sizes,
)

print = functools.partial(print, flush=True)
ACCOUNTS = 10_000
COMMIT_ROWS = 20_000
# The last stateful-operator progress of the fraud query, kept by a listener (the job stops its own query).
_LAST: dict = {}


def fill_bronze(uri: str, events: int, *, seed: int = 11, commit_rows: int = COMMIT_ROWS) -> int:
    """A bronze table as the ingest job writes it, in commits of ``commit_rows``; returns the frauds injected."""
    from jobs.lake import DeltaRsEngine
    from loadtest.generators import TransactionsGenerator

    generator = TransactionsGenerator(random.Random(seed), accounts=ACCOUNTS, fraud_rate=0.01)
    table = DeltaRsEngine().table(uri)
    now = datetime.now(UTC)
    for commit, offset in enumerate(range(0, events, commit_rows)):
        rows = min(commit_rows, events - offset)
        payloads = [generator.next_event().data for _ in range(rows)]
        table.append(
            pa.table(
                {
                    "data": pa.array(payloads, pa.binary()),
                    "partition_key": ["k"] * rows,
                    "shard_id": ["shard-0"] * rows,
                    "sequence_number": [str(offset + i) for i in range(rows)],
                    "arrival_time": pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                    "ingest_time": pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                    "batch_id": pa.array([commit] * rows, pa.int64()),
                }
            ),
            app_id="bench-ingest",
            batch_id=commit,
        )
    return len(generator.ground_truth()["fraud_transaction_ids"])


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_fraud(spark, bronze: str, workdir: Path, max_files: int) -> tuple[int, float, dict]:
    from jobs.lake import DeltaRsEngine
    from jobs.pipelines import fraud
    from jobs.pipelines._job import JobSettings

    job = JobSettings(
        source_table=bronze,
        lake=str(workdir / "lake"),
        checkpoint=str(workdir / "checkpoint"),
        trigger="available-now",
    )
    settings = fraud.FraudSettings(job=job, max_files_per_trigger=max_files)
    started = time.perf_counter()
    fraud.run(settings, spark=spark)
    elapsed = time.perf_counter() - started
    rows = (
        DeltaRsEngine()
        .table(settings.table_uri(fraud.TRANSACTIONS))
        .read(columns=["transaction_id"])
        .num_rows
    )
    alerts = DeltaRsEngine().table(settings.table_uri(fraud.ALERTS)).read(columns=["account_id"]).num_rows
    state = {
        "alerts": alerts,
        "state_rows": _LAST.get("numRowsTotal", 0),
        "rocksdb_sst_bytes": _LAST.get("customMetrics", {}).get("rocksdbSstFileSize", 0),
        "state_dir_bytes": _dir_bytes(workdir / "checkpoint" / "state"),
    }
    return rows, elapsed, state


def run_baseline(spark, bronze: str, workdir: Path, max_files: int) -> tuple[int, float]:
    """Bronze -> classified -> silver appends: the same source, envelope and sink, no state, no model."""
    from pyspark.sql import functions as F

    from jobs._run import caught_up
    from jobs.lake import DeltaRsEngine, foreach_batch_writer
    from jobs.pipelines import fraud
    from jobs.sources import read_delta_stream

    checkpoint = str(workdir / "checkpoint")
    silver = DeltaRsEngine().table(str(workdir / "silver"))
    transactions, _ = fraud.classify_transactions(
        read_delta_stream(spark, bronze, max_files_per_trigger=max_files, checkpoint_location=checkpoint)
    )
    started = time.perf_counter()
    query = (
        transactions.withColumn("late", F.lit(False))
        .writeStream.option("checkpointLocation", checkpoint)
        .foreachBatch(foreach_batch_writer(silver, app_id="bench-baseline"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    while not caught_up(query):
        query.awaitTermination(0.25)
        if query.exception() is not None:
            raise query.exception()
    query.stop()
    elapsed = time.perf_counter() - started
    return silver.read(columns=["transaction_id"]).num_rows, elapsed


class _StateListener:
    """Keeps the last stateful operator progress of the fraud query (the job stops its query itself)."""

    def __init__(self, spark) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                operators = event.progress.stateOperators
                if operators:
                    op = operators[0]
                    _LAST.update(
                        numRowsTotal=op.numRowsTotal,
                        customMetrics=dict(op.customMetrics or {}),
                    )

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        spark.streams.addListener(Listener())


def compare_old_new(args: argparse.Namespace) -> int:
    """The old-vs-new section (``--old-vs-new``): see the module's docstring."""
    from jobs.pipelines import fraud

    files, per_file, per_batch = old_vs_new_sizes(args)
    with tempfile.TemporaryDirectory(prefix="bench-fraud-ovn-") as tmp:
        root = Path(tmp)
        bronze = str(root / "bronze")
        events = files * per_file
        frauds = fill_bronze(bronze, events, commit_rows=per_file)
        print(
            f"bronze: {events:,} transactions over {ACCOUNTS:,} accounts ({frauds} frauds injected) in "
            f"{files} files of {per_file:,} rows"
        )
        status = old_vs_new(
            "fraud",
            root=root,
            rows=events,
            bronze=bronze,
            files_per_batch=per_batch,
            output=("silver transactions", lambda lake: delta_rows(lake / fraud.TRANSACTIONS), events),
        )
    print(load_average_line())
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--max-files-per-trigger", type=int, default=1, help="bronze commits per micro-batch")
    add_old_vs_new_arguments(parser, files=30, rows_per_file=500, files_per_batch=3, unit="rows")
    args = parser.parse_args()
    if args.old_vs_new:
        return compare_old_new(args)

    from jobs.session import build_session

    with tempfile.TemporaryDirectory(prefix="bench-fraud-") as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        frauds = fill_bronze(str(root / "bronze"), args.events)
        print(
            f"bronze: {args.events:,} transactions over {ACCOUNTS:,} accounts ({frauds} frauds injected) "
            f"in {time.perf_counter() - began:.1f} s"
        )
        spark = build_session("bench-fraud")
        _StateListener(spark)
        job, base, states = [], [], []
        with PeakRss() as rss:
            # Warm-up: JVM code paths and Python workers, not timed.
            fill_bronze(str(root / "warm"), 5_000, seed=5)
            run_fraud(spark, str(root / "warm"), root / "warm-run", args.max_files_per_trigger)
            for rep in range(args.repetitions):
                rows_b, elapsed_b = run_baseline(
                    spark, str(root / "bronze"), root / f"base-{rep}", args.max_files_per_trigger
                )
                _LAST.clear()
                rows_j, elapsed_j, state = run_fraud(
                    spark, str(root / "bronze"), root / f"job-{rep}", args.max_files_per_trigger
                )
                if rows_b != args.events or rows_j != args.events:
                    raise SystemExit(
                        f"expected {args.events} rows from both, got baseline={rows_b} fraud={rows_j}"
                    )
                base.append(rows_b / elapsed_b)
                job.append(rows_j / elapsed_j)
                states.append(state)
                print(
                    f"rep {rep}: baseline {base[-1]:,.0f} rows/s | fraud job {job[-1]:,.0f} rows/s, "
                    f"{state['alerts']} alerts, state {state['state_rows']:,} accounts, "
                    f"{state['state_dir_bytes'] / 2**20:.1f} MiB state dir"
                )
        spark.stop()
    ratio = statistics.median(job) / statistics.median(base)
    last = states[-1]
    print(f"baseline (envelope -> silver, no state): median {statistics.median(base):,.0f} rows/s")
    print(f"fraud job (state, features, model, 3 tables): median {statistics.median(job):,.0f} rows/s")
    print(f"ratio fraud/baseline: {ratio:.2f} (target >= 0.50) {'OK' if ratio >= 0.5 else 'BELOW TARGET'}")
    print(
        f"state store after the run: {last['state_rows']:,} accounts held, RocksDB SST "
        f"{last['rocksdb_sst_bytes'] / 2**20:.2f} MiB, checkpoint state dir {last['state_dir_bytes'] / 2**20:.1f} MiB"
    )
    print(
        f"peak RSS of the process tree: {rss.peak / 2**30:.2f} GiB; at the peak: "
        + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in sorted(rss.breakdown.items()))
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
