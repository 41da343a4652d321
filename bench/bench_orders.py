"""Benchmark: copy-on-write vs merge-on-read orders tables on the same CDC stream, as cow/mor ratios.

A fixed load: the same seeded order changes (default: 50,000 changes over a pool of 5,000 open orders, 10%
delivered out of order, 2% delivered twice) are appended to a bronze table at a fixed rate (default 1,000
changes/s, one commit per second) while the orders job streams them into one layout (trigger every 1 s);
once the feed ends the job drains and stops. Each layout runs alone, once per repetition, alternating which
goes first. Latency is from each change's ``event_time`` (set when it is appended) to the commit that made
it readable in a snapshot. Printed: the median of each figure per layout and the cow/mor ratio (the ratio
is what to read on a noisy machine). Both layouts must end in the generator's expected state; the script
exits 1 when either does not.

    .venv/bin/python bench/bench_orders.py [--changes 50000 --orders 5000 --rate 1000 --reps 3] [--small]

With ``--old-vs-new`` (instead of the above; issue 27) the orders job (copy-on-write) as it was at 1e4b57a (old:
every micro-batch collected to the driver as Arrow and MERGEd by delta-rs in the driver's Python, bronze read by
the Python Delta source, ``--delta-reader python``) against the working tree's (new: MERGE by delta-spark on the
executors), each a child ``python -m jobs orders --layout cow`` under ``local-cluster[1,2,1024]`` (the old code
through a shim giving its build_session that master: its entry has no --spark-master). One bronze table of
``--ovn-files`` files of ``--ovn-rows-per-file`` changes (the seeded generator above, over ``--orders`` open
orders) is drained with ``--trigger available-now`` at ``--ovn-files-per-batch`` files per micro-batch (1x)
and ten times that (10x). Prints rows/s (bronze rows over the drain: first offsets file to last commit file in
the checkpoint), the peak RSS of the driver (the job's Python + driver JVM) and of the executors (executor JVM
+ its Python workers), new/old rows/s and each path's driver peak 10x/1x; exits 1 unless every run's
``orders`` table holds the generator's expected number of orders.

    .venv/bin/python bench/bench_orders.py --old-vs-new [--quick]

Without git or commit 1e4b57a (e.g. a shallow clone) it says so and runs the new path alone (exit 0). Both paths
run with this venv: the old code runs as it was, no change but the master.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from bench._common import (
    add_old_vs_new_arguments,
    delta_rows,
    load_average_line,
    old_vs_new,
    old_vs_new_sizes,
)
from jobs.lake import DeltaRsEngine
from jobs.pipelines.orders import OrdersJob, OrdersSettings, OrdersTables
from jobs.session import build_session
from lakestack.orders_comparison import OrdersRecorder, layout_figures
from loadtest.generators import OrdersGenerator

MEASURES = (
    ("drain after the feed (s)", "drain_after_feed_s"),
    ("write rows/s", "write_rows_per_s"),
    ("latency p50 (s)", "latency_p50_s"),
    ("latency p95 (s)", "latency_p95_s"),
    ("bytes written", "bytes_written"),
    ("write amplification", "write_amplification"),
    ("data files", "files"),
    ("snapshot query (s)", "snapshot_query_s"),
    ("read-optimized query (s)", "read_optimized_query_s"),
    ("compactions", "compactions"),
    ("compaction time (s)", "compaction_s"),
)


class Feed:
    """Appends the seeded changes to a bronze table at ``rate`` changes/s, ``per_commit`` to a commit."""

    def __init__(self, uri: str, args: argparse.Namespace) -> None:
        self.uri, self.args = uri, args
        self.generator = OrdersGenerator(
            random.Random(args.seed),
            open_orders=args.orders,
            out_of_order_rate=args.out_of_order,
            duplicate_rate=args.duplicates,
        )
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        args, table = self.args, DeltaRsEngine().table(self.uri)
        interval = args.per_commit / args.rate
        started = time.perf_counter()
        try:
            for batch, start in enumerate(range(0, args.changes, args.per_commit)):
                # Hold to the rate: commit k goes out at k * interval after the start, never earlier.
                delay = started + batch * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                count = min(args.per_commit, args.changes - start)
                table.append(
                    _bronze([self.generator.next_event().data for _ in range(count)], start, batch),
                    app_id="bench-feed",
                    batch_id=batch,
                )
        except BaseException as error:  # reported by the caller
            self.error = error
        finally:
            self.done.set()

    def truth(self) -> dict[str, Any]:
        return self.generator.ground_truth()


def _bronze(payloads: list[bytes], first: int, batch: int) -> pa.Table:
    now = pa.array([int(time.time() * 1e6)] * len(payloads), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.table(
        {
            "data": pa.array(payloads, pa.binary()),
            "partition_key": pa.array(["k"] * len(payloads), pa.string()),
            "shard_id": pa.array(["shardId-000000000000"] * len(payloads), pa.string()),
            "sequence_number": pa.array([str(first + i) for i in range(len(payloads))], pa.string()),
            "arrival_time": now,
            "ingest_time": now,
            "batch_id": pa.array([batch] * len(payloads), pa.int64()),
        }
    )


def run_layout(spark: Any, root: Path, layout: str, rep: int, args: argparse.Namespace) -> dict:
    """Feed a fresh bronze table at the fixed rate while the job streams it into one layout; its figures."""
    bronze, lake = str(root / f"bronze-{layout}-{rep}"), str(root / f"lake-{layout}-{rep}")
    feed = Feed(bronze, args)
    DeltaRsEngine().table(bronze).create(_bronze([], 0, 0).schema)
    settings = OrdersSettings(
        layout=layout,  # type: ignore[arg-type]
        lake=lake,
        source_table=bronze,
        checkpoint=str(root / f"checkpoint-{layout}-{rep}"),
        trigger="processing-time=1s",
        compact_every=args.compact_every,
        tombstone_retention=timedelta(days=3650),
    )
    recorder = OrdersRecorder()
    job = OrdersJob(settings, on_batch=recorder)
    query = job.start(spark)
    feeder = threading.Thread(target=feed.run, name="bench-feed")
    started = time.perf_counter()
    feeder.start()
    try:
        while not feed.done.wait(0.5):
            if query.exception() is not None:
                break
        fed = time.perf_counter()
        query.processAllAvailable()
        drained = time.perf_counter()
    finally:
        feed.done.wait()
        feeder.join()
        query.stop()
        job.close()
    if feed.error is not None or query.exception() is not None:
        raise SystemExit(f"the {layout} run failed: {feed.error or query.exception()}")
    truth = feed.truth()
    compactions = job.compaction.outcomes if job.compaction else []
    figures = layout_figures(
        OrdersTables(lake),
        settings.layout,
        recorder.series[settings.layout],
        truth["expected_state"],
        change_bytes=recorder.change_bytes,
        compactions=compactions,
    )
    return {
        **figures,
        "feed_s": round(fed - started, 2),
        "drain_after_feed_s": round(drained - fed, 2),
        "batches": len(job.reports),
        "truth": {k: truth[k] for k in ("events", "out_of_order", "duplicates")},
    }


def _shown(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def median(runs: list[dict], key: str) -> float | None:
    values = [
        r[key] for r in runs if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)
    ]
    return statistics.median(values) if values else None


def compare_old_new(args: argparse.Namespace) -> int:
    """The old-vs-new section (``--old-vs-new``): see the module's docstring."""
    files, per_file, per_batch = old_vs_new_sizes(args)
    generator = OrdersGenerator(
        random.Random(args.seed),
        open_orders=args.orders,
        out_of_order_rate=args.out_of_order,
        duplicate_rate=args.duplicates,
    )
    with tempfile.TemporaryDirectory(prefix="bench-orders-ovn-") as scratch:
        root = Path(scratch)
        bronze = str(root / "bronze")
        table = DeltaRsEngine().table(bronze)
        for batch in range(files):
            payloads = [generator.next_event().data for _ in range(per_file)]
            table.append(_bronze(payloads, batch * per_file, batch), app_id="bench-feed", batch_id=batch)
        changes = files * per_file
        expected = len(generator.ground_truth()["expected_state"])
        print(
            f"bronze: {changes:,} changes over {args.orders:,} open orders in {files} files of "
            f"{per_file:,}; {expected:,} orders expected"
        )
        status = old_vs_new(
            "orders",
            root=root,
            rows=changes,
            bronze=bronze,
            files_per_batch=per_batch,
            job_args=("--layout", "cow"),
            output=("orders rows", lambda lake: delta_rows(lake / "orders"), expected),
        )
    print(load_average_line())
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--orders", type=int, default=5_000, help="open orders receiving changes")
    parser.add_argument("--out-of-order", type=float, default=0.10)
    parser.add_argument("--duplicates", type=float, default=0.02)
    parser.add_argument("--rate", type=float, default=1_000.0, help="changes per second appended to bronze")
    parser.add_argument("--per-commit", type=int, default=1_000, help="changes per bronze commit (one file)")
    parser.add_argument("--compact-every", type=int, default=5, help="mor: compact every N change commits")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--small", action="store_true", help="5,000 changes over 500 orders, 1 repetition")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    add_old_vs_new_arguments(parser, files=100, rows_per_file=1_000, files_per_batch=10, unit="changes")
    args = parser.parse_args()
    if args.old_vs_new:
        return compare_old_new(args)
    if args.small:
        args.changes, args.orders, args.rate, args.per_commit, args.reps = 5_000, 500, 500.0, 250, 1

    spark = build_session("bench-orders")
    print(
        f"{args.changes:,} changes over {args.orders:,} open orders ({args.out_of_order:.0%} out of order, "
        f"{args.duplicates:.0%} repeated) at {args.rate:,.0f} changes/s in commits of {args.per_commit:,}; "
        f"mor compaction every {args.compact_every} change commits; {args.reps} repetition(s)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-orders-") as scratch:
        root = Path(scratch)
        # Warm-up (a tenth of the load): Spark's Python workers and the JIT are not what is measured.
        warm = argparse.Namespace(**{**vars(args), "changes": max(args.per_commit, args.changes // 10)})
        run_layout(spark, root, "cow", -1, warm)
        runs: dict[str, list[dict]] = {"cow": [], "mor": []}
        for rep in range(args.reps):
            order = ("cow", "mor") if rep % 2 == 0 else ("mor", "cow")
            for layout in order:
                run = run_layout(spark, root, layout, rep, args)
                runs[layout].append(run)
                print(
                    f"  rep {rep} {layout}: {run['batches']} micro-batches, fed in {run['feed_s']} s, drained "
                    f"{run['drain_after_feed_s']} s later; {run['rows']:,} orders",
                    flush=True,
                )
    spark.stop()

    correct = all(r["matches_expected"] for layout in runs for r in runs[layout])
    rows = []
    for label, key in MEASURES:
        cow, mor = median(runs["cow"], key), median(runs["mor"], key)
        ratio = f"{cow / mor:.2f}" if cow is not None and mor else ""
        rows.append(
            (label, "n/a" if cow is None else f"{cow:,.4g}", "n/a" if mor is None else f"{mor:,.4g}", ratio)
        )
    widths = [
        max(len(r[i]) for r in [("measure (median)", "cow", "mor", "cow/mor"), *rows]) for i in range(4)
    ]
    for row in [("measure (median)", "cow", "mor", "cow/mor"), *rows]:
        print(
            "  " + "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row))
        )
    print(f"both layouts end in the expected state in every run: {'yes' if correct else 'NO'}")
    if args.json:
        print(json.dumps({"runs": runs, "correct": correct}, default=str))
    return 0 if correct else 1


if __name__ == "__main__":
    raise SystemExit(main())
