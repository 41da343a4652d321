"""`lakestack bench --stack <name>`: up, load with a shape, drain, measure, report with plots, destroy."""

from __future__ import annotations

import argparse
from pathlib import Path

from lakestack.commands._types import (
    add_fault_arguments,
    duration,
    non_negative_float,
    pipeline_names,
    positive_float,
    positive_int,
)
from lakestack.demo_pipelines import PIPELINES
from loadtest.shapes import SHAPES


def _run(args: argparse.Namespace) -> int:
    from lakestack.bench import BenchSettings, bench

    settings = BenchSettings(
        stack=args.stack,
        duration_s=args.duration,
        max_cost_usd=args.max_cost,
        shape=args.shape,
        users=args.users,
        rate=args.rate,
        keep=args.keep,
        reports_dir=Path(args.reports_dir),
        drain_timeout_s=args.drain_timeout,
        port=args.port,
        max_records_per_shard=args.max_records_per_shard,
        pipelines=args.pipelines,
        faults=args.faults,
        faults_seed=args.faults_seed,
    )
    report = bench(settings)
    if args.json:
        import json

        print(json.dumps(report.to_dict()))
    return report.outcome.exit_code


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bench`` to the ``lakestack`` command line."""
    parser = subparsers.add_parser(
        "bench",
        help="up a stack, load it with a shape, measure, report with plots, tear it down (always)",
        description=(
            "Benchmark a stack end to end: stand it up (`local`: the embedded emulator and Spark on this "
            "machine; any other stack: `pulumi up` through the Automation API, which needs the Pulumi CLI), "
            "wait until the pipelines' queries run, load it with Locust following a shape, drain, reconcile "
            "the ledger against the tables read back from storage, write reports/<time>/report.{md,json,html} "
            "with plots, and tear everything down, also after a failure, Ctrl-C or SIGTERM (unless --keep). "
            "Refuses to start when the estimated cost exceeds --max-cost. Exit status: 0 every event landed "
            "once and teardown completed, 1 otherwise, 2 a usage error, 130/143 interrupted."
        ),
    )
    parser.add_argument(
        "--stack",
        required=True,
        metavar="NAME",
        help="stack name (Pulumi.<NAME>.yaml); `local`: the emulator",
    )
    parser.add_argument(
        "--duration", type=duration, default=300.0, help="how long to load, e.g. 60s, 10m (default: 5m)"
    )
    parser.add_argument(
        "--max-cost",
        type=non_negative_float,
        default=5.0,
        metavar="USD",
        help="refuse to start when the run's estimated cost exceeds this (default: %(default)s)",
    )
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="ramp",
        help="load shape; ramp never more than doubles within 15 minutes, as on-demand streams need "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--users", type=positive_int, default=4, help="peak Locust users (default: %(default)s)"
    )
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=1_000.0,
        help="peak send rate, events/s across all users (default: %(default)s)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=duration,
        default=600.0,
        help="longest wait for the pipelines to catch up after the load (default: 10m)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the stack (local: the emulator) up afterwards"
    )
    parser.add_argument("--reports-dir", default="reports", help="where reports go (default: %(default)s)")
    parser.add_argument(
        "--pipelines",
        type=pipeline_names,
        default=None,
        metavar="NAME[,NAME...]",
        help=f"local: the demo's pipelines to run (ingest always runs; default: all, {', '.join(PIPELINES)}); a "
        "cloud stack runs its lakestack:pipelines",
    )
    parser.add_argument("--port", type=int, default=None, help="local: emulator port (default: a free one)")
    parser.add_argument(
        "--max-records-per-shard",
        type=positive_int,
        default=10_000,
        help="local: ingest cap per shard per micro-batch (default: %(default)s)",
    )
    # local only: the emulator injects them, as in `lakestack demo`; refused for a cloud stack.
    add_fault_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="also print the report as one JSON line, last on stdout (the demo's keys plus stack, "
        "report_dir, estimated_cost_usd, teardown)",
    )
    parser.set_defaults(handler=_run)
