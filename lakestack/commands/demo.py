"""`lakestack demo`: the whole pipeline on this machine, then a reconciled report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jobs.entry import add_spark_arguments
from jobs.session import parse_spark_conf
from lakestack.commands._types import (
    PIPELINE_NAMES_HELP,
    add_fault_arguments,
    pipeline_names,
    positive_float,
    positive_int,
)
from lakestack.demo_pipelines import PIPELINES
from lakestack.prerequisites import check_java
from lakestack.targets import CLOUDS


def _rates(value: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in value.split(",") if part.strip())
    except ValueError:
        rates = ()
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(
            f"expected events/s rates above 0 separated by commas (e.g. 1000,2000,4000), found {value!r}"
        )
    return tuple(sorted(set(rates)))


def _run(args: argparse.Namespace) -> int:
    check_java(os.environ)
    from lakestack.demo import DemoSettings, run_demo, run_sweep_demo

    settings = DemoSettings(
        pipelines=args.pipelines,
        events=args.events,
        rate=args.rate,
        users=args.users,
        port=args.port,
        reports_dir=Path(args.reports_dir),
        keep_emulator=args.keep_emulator,
        max_records_per_shard=args.max_records_per_shard,
        faults=args.faults,
        faults_seed=args.faults_seed,
        cloud=args.cloud,
        spark_master=args.spark_master,
        spark_conf=parse_spark_conf(args.spark_conf),
    )
    if args.sweep:
        from lakestack.rate_sweep import sustainable_rate

        results = run_sweep_demo(settings, args.sweep, seconds=args.sweep_seconds)
        if args.json:
            import json

            print(
                json.dumps(
                    {
                        "rates": [r.to_dict() for r in results],
                        "sustainable_rate_eps": sustainable_rate(results),
                    }
                )
            )
        return 0 if all(r.missing == 0 and r.duplicates == 0 for r in results) else 1
    report = run_demo(settings)
    if args.json:
        print(report.to_json())
    return 0 if report.ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``demo`` to the ``lakestack`` command line."""
    parser = subparsers.add_parser(
        "demo",
        help="run the whole pipeline on this machine and report missing/duplicates/latency",
        description=(
            "Start the emulators (--cloud), send synthetic events with Locust (each scenario the pipelines need), "
            "ingest them with Spark into a Delta bronze table, run the pipelines on it, reconcile every table "
            "against the ledgers and the ground truth, and write reports/<timestamp>/report.{json,md}. Exit 1 "
            "when any event is missing or duplicated or any pipeline's check fails."
        ),
        epilog="""examples:
  lakestack demo
  lakestack demo --pipelines sales,orders --events 50000 --rate 2000
  lakestack demo --cloud azure --json
  lakestack demo --sweep 1000,2000,4000 --sweep-seconds 60""",
    )
    parser.add_argument(
        "--cloud",
        choices=CLOUDS,
        default="aws",
        help="which cloud's path runs on local stand-ins: aws (moto: Kinesis + S3) or azure (Azurite + a "
        "Kafka-protocol broker for Event Hubs, Spark's Kafka path, abfss:// tables) (default: %(default)s)",
    )
    parser.add_argument(
        "--pipelines",
        type=pipeline_names,
        default=None,
        metavar="NAME[,NAME...]",
        help=f"pipelines to run (ingest always runs); default: all ({', '.join(PIPELINES)}). {PIPELINE_NAMES_HELP}",
    )
    parser.add_argument(
        "--events",
        type=positive_int,
        default=10_000,
        help="events to send per scenario",
    )
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=1_000.0,
        help="send rate per scenario, events/s",
    )
    parser.add_argument("--users", type=positive_int, default=4, help="Locust users per scenario")
    parser.add_argument("--port", type=int, default=None, help="emulator port (default: a free one)")
    parser.add_argument("--reports-dir", default="reports", metavar="DIR", help="where reports go")
    parser.add_argument(
        "--max-records-per-shard",
        type=positive_int,
        default=10_000,
        help="ingest cap per shard per micro-batch",
    )
    parser.add_argument(
        "--keep-emulator",
        action="store_true",
        help="leave the emulator running afterwards to inspect its tables",
    )
    parser.add_argument(
        "--sweep",
        type=_rates,
        default=None,
        metavar="RATE[,RATE...]",
        help="instead of one run: the ingest job alone at each rate (events/s) for --sweep-seconds, drained "
        "between rates; prints p50/p95/p99, sent and landed rates, whether the backlog stayed bounded, and the "
        "sustainable rate last (sweep.json in the run's folder)",
    )
    parser.add_argument(
        "--sweep-seconds",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="how long each rate of --sweep is sent",
    )
    add_fault_arguments(parser)
    add_spark_arguments(parser)
    parser.add_argument(
        "--json", action="store_true", help="also print the report as one JSON line, last on stdout"
    )
    parser.set_defaults(handler=_run)
