"""`lakestack bench --stack <name>`: up, load with a shape, drain, measure, report with plots, destroy."""

from __future__ import annotations

import argparse
from pathlib import Path

from lakestack.commands._types import (
    PIPELINE_NAMES_HELP,
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

    soak = args.soak
    settings = BenchSettings(
        stack=args.stack,
        # A soak is a steady load for its whole length.
        duration_s=args.duration if soak is None else soak,
        max_cost_usd=args.max_cost,
        shape=args.shape if soak is None else "constant",
        users=args.users,
        rate=args.rate,
        keep=args.keep,
        reports_dir=Path(args.reports_dir),
        drain_timeout_s=args.drain_timeout,
        port=args.port,
        max_records_per_shard=args.max_records_per_shard,
        pipelines=args.pipelines,
        soak_s=soak,
        soak_sample_s=args.soak_sample,
        soak_warmup_s=args.soak_warmup,
        soak_maintenance_s=args.soak_maintenance,
        faults=args.faults,
        faults_seed=args.faults_seed,
    )
    report = bench(settings)
    if args.json:
        import json

        print(json.dumps(report.to_dict()))
    return report.exit_code


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
        epilog="""examples:
  lakestack bench --stack local --duration 2m
  lakestack bench --stack local --soak 30m --rate 500
  lakestack bench --stack dev --shape ramp --rate 5000 --max-cost 3""",
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
        help="refuse to start when the run's estimated cost exceeds this",
    )
    parser.add_argument(
        "--shape",
        choices=SHAPES,
        default="ramp",
        help="load shape; ramp never more than doubles within 15 minutes, as on-demand streams need "
        "(default: %(default)s)",
    )
    parser.add_argument("--users", type=positive_int, default=4, help="peak Locust users")
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=1_000.0,
        help="peak send rate, events/s across all users",
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
    parser.add_argument("--reports-dir", default="reports", metavar="DIR", help="where reports go")
    parser.add_argument(
        "--pipelines",
        type=pipeline_names,
        default=None,
        metavar="NAME[,NAME...]",
        help=f"local: the demo's pipelines to run (ingest always runs; default: all, {', '.join(PIPELINES)}); a "
        f"cloud stack runs its lakestack:pipelines. {PIPELINE_NAMES_HELP}",
    )
    parser.add_argument("--port", type=int, default=None, help="local: emulator port (default: a free one)")
    parser.add_argument(
        "--max-records-per-shard",
        type=positive_int,
        default=10_000,
        help="local: ingest cap per shard per micro-batch",
    )
    soak = parser.add_argument_group(
        "soak (--stack local)",
        "Hold a steady load (constant shape at --rate per scenario) through ingest and every pipeline with the "
        "maintenance job beside them; sample memory, checkpoints, tables, state store and latency; judge the "
        "slopes after warm-up against budgets. Exit status 0 only when every budget passes and every event "
        "landed exactly once. Ctrl-C stops it and still reports what was sampled.",
    )
    soak.add_argument(
        "--soak",
        type=duration,
        default=None,
        metavar="TIME",
        help="soak this long, e.g. 30m (replaces --duration)",
    )
    soak.add_argument(
        "--soak-sample",
        type=duration,
        default=60.0,
        metavar="TIME",
        help="time between samples (default: 60s)",
    )
    soak.add_argument(
        "--soak-warmup",
        type=duration,
        default=None,
        metavar="TIME",
        help="samples before this are not judged (default: 5m, or a sixth of a shorter soak)",
    )
    soak.add_argument(
        "--soak-maintenance",
        type=duration,
        default=None,
        metavar="TIME",
        help="run maintenance (compaction + log checkpoint of bronze and every pipeline table) this often "
        "(default: 5m, or a third of the time after warm-up in a shorter soak)",
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
