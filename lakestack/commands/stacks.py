"""`lakestack plan | up | down | outputs --stack <name>`: the stack commands of the `lakestack` CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from infra.config import load_stack_settings
from infra.pricing import estimate_hourly_cost
from lakestack import stacks as automation


def plan_summary(stack: str, *, project_dir: Path | None = None) -> dict[str, Any]:
    """The shape and estimated hourly cost of a stack, from its stack file alone (no Pulumi CLI).

    Args:
        stack: stack name (reads ``Pulumi.<stack>.yaml``).
        project_dir: folder of the stack files; the repository root when ``None``.
    """
    settings = load_stack_settings(stack, project_dir=project_dir)
    sizing = settings.sizing
    enabled = settings.cluster.enabled
    if settings.cloud == "aws":
        cost = estimate_hourly_cost(settings)
        pricing: dict[str, Any] = {
            "hourly_cost_usd": cost.hourly_usd,
            "hourly_cost_usd_at_max_workers": cost.hourly_usd_at_max_workers,
            "prices_as_of": cost.prices_as_of,
            "cost_lines": cost.lines,
            "notes": list(cost.notes),
        }
    else:
        # The price table holds AWS prices only, and the Azure stack is not built yet.
        pricing = {
            "hourly_cost_usd": None,
            "hourly_cost_usd_at_max_workers": None,
            "prices_as_of": None,
            "cost_lines": {},
            "notes": ["no Azure prices in infra/prices.json yet"],
        }
    return {
        "stack": stack,
        "cloud": settings.cloud,
        "region": settings.region,
        "workers": sizing.workers if enabled else 0,
        "max_workers": settings.cluster.max_workers if enabled else 0,
        "executor_cores": sizing.executor_cores,
        "executor_memory_gb": sizing.executor_memory_gb,
        "instance_type": sizing.instance_type if enabled else None,
        "stream_mode": settings.stream.mode,
        "shards": settings.stream.shards,
        **pricing,
    }


def _plan(args: argparse.Namespace) -> int:
    summary = plan_summary(args.stack)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return 0
    if summary["workers"]:
        cluster = (
            f"{summary['workers']} x {summary['instance_type']} core nodes (up to {summary['max_workers']}) "
            f"+ 1 primary; each runs 1 executor with {summary['executor_cores']} cores and "
            f"{summary['executor_memory_gb']} GB"
        )
    else:
        cluster = "none (jobs run on this machine)"
    stream = f"Kinesis {summary['stream_mode']}" + (
        f", {summary['shards']} shards" if summary["shards"] else ""
    )
    print(f"stack {summary['stack']} ({summary['cloud']}, {summary['region']})")
    print(f"  cluster : {cluster}")
    print(f"  stream  : {stream}")
    print(
        f"  cost    : ~{summary['hourly_cost_usd']:.2f} USD/hour ({summary['hourly_cost_usd_at_max_workers']:.2f} at max workers)"
    )
    for name, value in summary["cost_lines"].items():
        print(f"            {name:<18} {value:.4f}")
    for note in summary["notes"]:
        print(f"  note    : {note}")
    return 0


def _up(args: argparse.Namespace) -> int:
    outputs = automation.up(args.stack)
    print(json.dumps(outputs, indent=2, sort_keys=True))
    return 0


def _down(args: argparse.Namespace) -> int:
    automation.down(args.stack)
    return 0


def _outputs(args: argparse.Namespace) -> int:
    outputs = automation.stack_outputs(args.stack)
    print(json.dumps(outputs, indent=None if args.json else 2, sort_keys=True))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plan``, ``up``, ``down`` and ``outputs`` to the ``lakestack`` command.

    Their errors (bad config, no Pulumi CLI, a failed update) are reported by :func:`lakestack.cli.main`.
    """

    def stack_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--stack",
            required=True,
            metavar="NAME",
            help="stack name; its settings are in Pulumi.<NAME>.yaml",
        )

    plan = subparsers.add_parser(
        "plan",
        help="show a stack's shape and estimated hourly cost (no Pulumi CLI needed)",
        description="Read Pulumi.<stack>.yaml, validate it like `pulumi up` would, and print the cluster "
        "shape (workers, executor cores and memory, instance type), the stream mode and shards, and an "
        "hourly cost estimate from infra/prices.json.",
    )
    stack_option(plan)
    plan.add_argument("--json", action="store_true", help="print one JSON object (last line of stdout)")
    plan.set_defaults(handler=_plan)

    up = subparsers.add_parser(
        "up",
        help="create or update a stack in the cloud (needs the Pulumi CLI and cloud credentials)",
        description="Run `pulumi up` for the stack through the Automation API and print its outputs.",
    )
    stack_option(up)
    up.set_defaults(handler=_up)

    down = subparsers.add_parser(
        "down",
        help="destroy a stack's resources (needs the Pulumi CLI)",
        description="Run `pulumi destroy` for the stack through the Automation API.",
    )
    stack_option(down)
    down.set_defaults(handler=_down)

    outputs = subparsers.add_parser(
        "outputs",
        help="print a deployed stack's outputs as JSON (needs the Pulumi CLI)",
        description="Print the stack outputs: stream_name, stream_arn, region, the bucket names, cluster_id, "
        "dashboard_url, table_uri.",
    )
    stack_option(outputs)
    outputs.add_argument("--json", action="store_true", help="one line instead of indented JSON")
    outputs.set_defaults(handler=_outputs)
