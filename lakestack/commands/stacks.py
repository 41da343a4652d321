"""`lakestack plan | up | down | outputs --stack <name>`: the stack commands of the `lakestack` CLI."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from infra.capacity import kinesis_capacity
from infra.config import EXPIRES_AT_TAG, StackSettings, load_stack_settings, stack_cloud
from infra.leftovers import what_stays_after_destroy
from infra.posture import format_posture
from infra.pricing import estimate_hourly_cost, interface_endpoint_plan
from lakestack import stacks as automation
from lakestack.errors import UserError


def security_section(settings: StackSettings) -> dict[str, list[str]] | None:
    """The plan's ``security`` object (contract C6) for the stack's cloud; ``None`` where none is built."""
    if settings.cloud == "aws":
        from infra.aws.posture import aws_security_posture

        return aws_security_posture(settings).as_dict()
    return None


def plan_summary(stack: str, *, project_dir: Path | None = None) -> dict[str, Any]:
    """The shape and estimated hourly cost of a stack, from its stack file alone (no Pulumi CLI).

    Args:
        stack: stack name (reads ``Pulumi.<stack>.yaml``).
        project_dir: folder of the stack files; the repository root when ``None``.
    """
    if stack_cloud(stack, project_dir=project_dir) == "azure":
        from infra.azure.plan import plan_summary as azure_plan_summary
        from infra.azure.settings import load_azure_settings

        return azure_plan_summary(load_azure_settings(stack, project_dir=project_dir))
    settings = load_stack_settings(stack, project_dir=project_dir)
    sizing = settings.sizing
    enabled = settings.cluster.enabled
    cost = estimate_hourly_cost(settings)
    pricing: dict[str, Any] = {
        "hourly_cost_usd": cost.hourly_usd,
        "hourly_cost_usd_at_max_workers": cost.hourly_usd_at_max_workers,
        "prices_as_of": cost.prices_as_of,
        "cost_lines": cost.lines,
        "usd_per_gb": cost.usd_per_gb,
        "per_gb_lines": cost.per_gb_lines,
        "loadgen_hourly_cost_usd": cost.loadgen_hourly_usd,
        "notes": list(cost.notes),
    }
    loadgen = settings.loadgen
    return {
        "stack": stack,
        "cloud": settings.cloud,
        "region": settings.region,
        "runtime": settings.cluster.release.describe() if enabled else None,
        "workers": sizing.workers if enabled else 0,
        "max_workers": settings.cluster.max_workers if enabled else 0,
        "executor_cores": sizing.executor_cores,
        "executor_memory_gb": sizing.executor_memory_gb,
        "driver_memory_mb": sizing.driver_memory_mb,
        "driver_memory_overhead_mb": sizing.driver_memory_overhead_mb,
        "instance_type": sizing.instance_type if enabled else None,
        "stream_mode": settings.stream.mode,
        "shards": settings.stream.shards,
        "pipelines": list(settings.pipelines),
        # The account is known only to `pulumi up`; the plan shows where it goes.
        "buckets": settings.bucket_names_for("<account>"),
        "expires_at": settings.tags[EXPIRES_AT_TAG],
        "loadgen": (
            {
                "workers": loadgen.workers,
                "cpu": loadgen.cpu,
                "memory_mb": loadgen.memory_mb,
                "image": loadgen.image,
            }
            if loadgen
            else None
        ),
        **pricing,
        # Which interface endpoints `pulumi up` adds, what they cost, and the load the choice was made for.
        "endpoints": interface_endpoint_plan(settings).as_dict(),
        "capacity": kinesis_capacity(
            mode=settings.stream.mode,
            shards=settings.stream.shards,
            cores=sizing.task_slots if enabled else 0,
        ).as_dict(),
        "security": security_section(settings),
    }


def _plan(args: argparse.Namespace) -> int:
    summary = plan_summary(args.stack)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return 0
    print_plan(summary)
    return 0


def print_plan(summary: dict[str, Any]) -> None:
    """The plan in words, as `lakestack plan` prints it (and `lakestack up` before it asks)."""
    azure = summary["cloud"] == "azure"
    if summary["workers"]:
        per = "per pipeline " if len(summary["pipelines"]) > 1 else ""
        nodes = (
            f"worker nodes (up to {summary['max_workers']}) + 1 driver node"
            if azure
            else f"core nodes (up to {summary['max_workers']}) + 1 primary"
        )
        cluster = (
            f"{summary['workers']} x {summary['instance_type']} {nodes}; each runs 1 executor {per}with "
            f"{summary['executor_cores']} cores and {summary['executor_memory_gb']} GB"
        )
    else:
        cluster = "none (jobs run on this machine)"
    if azure:
        stream = f"Event Hubs {summary['stream_mode']}, {summary['shards']} partitions"
    else:
        stream = f"Kinesis {summary['stream_mode']}" + (
            f", {summary['shards']} shards" if summary["shards"] else ""
        )
    print(f"stack {summary['stack']} ({summary['cloud']}, {summary['region']})")
    print(f"  cluster : {cluster}")
    if summary.get("runtime"):
        print(f"  runtime : {summary['runtime']}")
    print(f"  steps   : {', '.join(summary['pipelines'])} (one step and checkpoint each)")
    if summary["workers"] and "driver_memory_mb" in summary:
        print("\n".join(memory_lines(summary)))
    print(f"  stream  : {stream}")
    for i, (role, bucket) in enumerate(summary["buckets"].items()):
        print(f"  {'buckets :' if i == 0 else '':<9} {role:<11} {bucket}")
    if summary["loadgen"]:
        lg = summary["loadgen"]
        print(
            f"  loadgen : 1 Locust master + {lg['workers']} workers on Fargate ({lg['cpu']} CPU units, "
            f"{lg['memory_mb']} MiB each), {lg['image']}"
        )
    print(f"  expires : {summary['expires_at']} (tag lakestack:expires-at)")
    if summary.get("endpoints"):
        print("\n".join(endpoint_lines(summary["endpoints"])))
    _print_cost(summary)
    print("\n".join(format_capacity(summary["capacity"])))
    if summary["security"] is not None:
        print("\n".join(format_posture(summary["security"])))


def endpoint_lines(endpoints: dict[str, Any]) -> list[str]:
    """The plan's interface-endpoint lines: which ones, what they cost, why."""
    services = endpoints["services"]
    chosen = (
        f"{', '.join(services)} (interface, private DNS, TLS 443 from the VPC only), "
        f"{endpoints['hourly_usd']:.4f} USD/hour"
        if services
        else "none: AWS APIs but S3 are reached through the NAT"
    )
    return [f"  endpoint: {chosen}", f"            {endpoints['reason']}"]


def memory_lines(summary: dict[str, Any]) -> list[str]:
    """What the driver and each executor hold, in words: the driver plans and commits, executors move rows."""
    return [
        f"  driver  : {summary['driver_memory_mb']} MB heap + {summary['driver_memory_overhead_mb']} MB off-heap "
        "per pipeline: stream offsets, the Delta log, small aggregates; no Kinesis record and none of ingest's, "
        "sales' or fraud's rows reach it (executors read Kinesis, delta-spark writes), but orders' batches "
        "(delta-rs) still pass through it for now",
        f"  executor: {summary['executor_memory_gb']} GB, {summary['executor_cores']} cores: the rows (reads, "
        "transforms, Parquet writes), so throughput grows with executors",
    ]


def _print_cost(summary: dict[str, Any]) -> None:
    if summary["hourly_cost_usd"] is None:
        for note in summary["notes"]:
            print(f"  note    : {note}")
        return
    print(
        f"  cost    : ~{summary['hourly_cost_usd']:.2f} USD/hour ({summary['hourly_cost_usd_at_max_workers']:.2f} at max workers)"
    )
    for name, value in summary["cost_lines"].items():
        print(f"            {name:<20} {value:.4f}")
    if summary["per_gb_lines"]:
        print(f"            plus ~{summary['usd_per_gb']:.3f} USD per GB of events:")
        for name, value in summary["per_gb_lines"].items():
            print(f"            {name:<20} {value:.4f}")
    if summary["loadgen_hourly_cost_usd"] is not None:
        print(f"            load generator ~{summary['loadgen_hourly_cost_usd']:.2f} USD per hour of load")
    for note in summary["notes"]:
        print(f"  note    : {note}")


def format_capacity(capacity: dict[str, Any]) -> list[str]:
    """The plan's capacity lines: the stream's limit, the cluster's rows/s, the lower of the two."""
    rows = capacity["cluster_rows_per_s"]
    cluster = (
        f"{capacity['cluster_cores']} cores x {capacity['rows_per_core_s']:,} rows/s = {rows:,} rows/s"
        if rows is not None
        else "none in this stack"
    )
    lines = [
        f"  capacity: ~{capacity['sustainable_events_per_s']:,} events/s sustainable "
        f"(bound by the {capacity['bound_by']})",
        f"            stream   {capacity['stream_limit']}",
        f"            cluster  {cluster}",
    ]
    lines += [f"            assumes  {line}" for line in capacity["assumptions"]]
    return lines


def cost_to_expiry(summary: dict[str, Any], *, now: datetime) -> str:
    """What the stack costs per hour, and if left running until its expiry tag, in one line."""
    hourly = summary.get("hourly_cost_usd")
    if hourly is None:
        return "cost    : not estimated (see the notes above)"
    expires = datetime.fromisoformat(str(summary["expires_at"]).replace("Z", "+00:00"))
    hours = max((expires - now).total_seconds() / 3600, 0.0)
    return (
        f"cost    : ~{hourly:.2f} USD/hour; ~{hourly * hours:.2f} USD if left up until it expires "
        f"({hours:.0f} h, {summary['expires_at']}); `lakestack down` stops it sooner"
    )


def confirm(question: str, *, yes: bool, command: str, stream: TextIO | None = None) -> bool:
    """Ask ``question`` on the terminal; True for y/yes. ``--yes`` answers for the user.

    Raises:
        UserError: nobody to ask (stdin is not a terminal) and no ``--yes``.
    """
    if yes:
        return True
    source = sys.stdin if stream is None else stream
    if not source.isatty():
        raise UserError(
            f"{command} changes cloud resources and asks first, but stdin is not a terminal; "
            f"pass --yes to go ahead without asking."
        )
    print(f"{question} [y/N] ", end="", flush=True)
    return source.readline().strip().lower() in {"y", "yes"}


def _up(args: argparse.Namespace, *, stream: TextIO | None = None) -> int:
    # The plan validates the stack file; the CLI is checked before asking, so an answer is never wasted.
    summary = plan_summary(args.stack)
    automation.require_cli("up")
    print_plan(summary)
    print(f"  {cost_to_expiry(summary, now=datetime.now(UTC))}")
    command = f"lakestack up --stack {args.stack}"
    if not confirm(
        f"Create or update stack {args.stack!r} as above?", yes=args.yes, command=command, stream=stream
    ):
        print(f"{command}: not confirmed; nothing was changed")
        return 1
    outputs = automation.up(args.stack)
    print(json.dumps(outputs, indent=2, sort_keys=True))
    return 0


def _down(args: argparse.Namespace, *, stream: TextIO | None = None) -> int:
    summary = plan_summary(args.stack)
    automation.require_cli("down")
    command = f"lakestack down --stack {args.stack}"
    question = (
        f"Destroy every resource of stack {args.stack!r} ({summary['cloud']}, {summary['region']}), "
        "its tables and checkpoints with them?"
    )
    if not confirm(question, yes=args.yes, command=command, stream=stream):
        print(f"{command}: not confirmed; nothing was destroyed")
        return 1
    automation.down(args.stack)
    print(what_stays_after_destroy(args.stack))
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
        "shape (workers, executor cores and memory, instance type or Synapse node size), the pipelines, the "
        "stream mode and shards (Event Hubs partitions on Azure), the bucket names (filesystems on Azure), the "
        "expiry tag, an hourly and per-GB cost estimate from infra/prices.json (infra/azure/prices.json on "
        "Azure), and the security posture (encryption, network, logging, identities, and every control "
        "switched off).",
    )
    stack_option(plan)
    plan.epilog = "example:\n  lakestack plan --stack dev --json"
    plan.add_argument("--json", action="store_true", help="print one JSON object (last line of stdout)")
    plan.set_defaults(handler=_plan)

    up = subparsers.add_parser(
        "up",
        help="create or update a stack in the cloud (needs the Pulumi CLI and cloud credentials)",
        description="Print the plan (resources, cost per hour and until the stack expires), ask, then run "
        "`pulumi up` for the stack through the Automation API and print its outputs. Without a terminal to ask "
        "on it refuses unless --yes is given. Exit 1 when not confirmed.",
        epilog="examples:\n  lakestack up --stack dev\n  lakestack up --stack dev --yes     # in a script: no question",
    )
    stack_option(up)
    up.add_argument("--yes", action="store_true", help="create without asking")
    up.set_defaults(handler=_up)

    down = subparsers.add_parser(
        "down",
        help="destroy a stack's resources (needs the Pulumi CLI)",
        description="Ask, then run `pulumi destroy` for the stack through the Automation API (its buckets go "
        "with their data). Without a terminal to ask on it refuses unless --yes is given. Exit 1 when not "
        "confirmed.",
        epilog="example:\n  lakestack down --stack dev --yes",
    )
    stack_option(down)
    down.add_argument("--yes", action="store_true", help="destroy without asking")
    down.set_defaults(handler=_down)

    outputs = subparsers.add_parser(
        "outputs",
        help="print a deployed stack's outputs as JSON (needs the Pulumi CLI)",
        description="Print the stack outputs: stream_name, stream_arn, region, the bucket names, cluster_id, "
        "step_ids, dashboard_url, alarm_topic_arn, table_uri, glue_database, table_uris, pipelines (lake and "
        "checkpoint per pipeline), expires_at, loadgen.",
    )
    stack_option(outputs)
    outputs.epilog = "example:\n  lakestack outputs --stack dev --json"
    outputs.add_argument("--json", action="store_true", help="one line instead of indented JSON")
    outputs.set_defaults(handler=_outputs)
