"""`lakestack load`: run the Locust suite against the local emulator or a deployed stack."""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakestack.commands._flags import add_deprecated_alias
from lakestack.commands._types import duration, positive_float, positive_int
from lakestack.emulator import free_port
from lakestack.errors import TargetError
from loadtest.generators import SCENARIOS
from loadtest.runner import EVENTHUBS_LOCUSTFILE, LOCUSTFILE, LocustRun, distributed_extra, worker_command
from loadtest.shapes import SHAPES

# Workers quit within a second of a normal end; one whose master failed early would wait 60 s for it.
WORKER_EXIT_TIMEOUT_SECONDS = 10
CONNECTION_STRING_VARIABLE = "LAKESTACK_EVENTHUBS_CONNECTION_STRING"


@dataclass(frozen=True)
class Target:
    """Where the load goes, as read from the emulator state or the stack outputs."""

    stream: str
    region: str
    endpoint_url: str | None
    environment: dict[str, str] = field(default_factory=dict)
    eventhubs_bootstrap: str | None = None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``load`` subcommand to the ``lakestack`` command line."""
    parser = subparsers.add_parser(
        "load",
        help="generate load with Locust (Kinesis PutRecords) against the emulator or a stack",
        description=(
            "Run the Locust load suite. --stack local uses the emulator started by `lakestack local up`; "
            "any other value is a Pulumi stack whose outputs name the stream and region (AWS) or the Event Hubs "
            "namespace and hub (Azure; the send connection string comes from "
            "$LAKESTACK_EVENTHUBS_CONNECTION_STRING). Statistics go to "
            "OUT_DIR (CSV and HTML) and every acknowledged event to OUT_DIR/ledger. Exit status: 0 when "
            "every event was acknowledged, 1 when some failed for good, 2 for a usage error."
        ),
        epilog="""examples:
  lakestack load --stack local --rate 500 --duration 2m
  lakestack load --stack local --scenario transactions --max-events 20000
  lakestack load --stack dev --shape ramp --users 8 --duration 30m""",
    )
    parser.add_argument(
        "--stack", default="local", metavar="NAME", help="'local' (the emulator) or a Pulumi stack name"
    )
    parser.add_argument("--scenario", default="sales", choices=SCENARIOS, help="event generator")
    parser.add_argument("--users", type=positive_int, default=2, help="concurrent Locust users")
    parser.add_argument(
        "--spawn-rate",
        type=positive_float,
        default=None,
        help="users started per second (default: all at once)",
    )
    parser.add_argument(
        "--duration",
        default="1m",
        type=_run_time,
        metavar="TIME",
        help="stop after this long, e.g. 90s, 10m, 1h30m; with --shape, the shape's length",
    )
    parser.add_argument(
        "--max-events", type=positive_int, default=None, help="send exactly this many events, then stop"
    )
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=None,
        help="events/s across all users (default: as fast as possible)",
    )
    parser.add_argument(
        "--batch-size",
        type=_batch_size,
        default=100,
        help="events per PutRecords, 1-500",
    )
    parser.add_argument(
        "--workers", type=_workers, default=0, help="run a master and this many local workers"
    )
    parser.add_argument(
        "--shape", choices=SHAPES, default=None, help="load shape instead of a fixed --users (peak = --users)"
    )
    parser.add_argument(
        "--web", action="store_true", help="open Locust's web UI on 127.0.0.1:8089 instead of headless"
    )
    parser.add_argument(
        "--out-dir",
        default=None,
        metavar="DIR",
        help="where statistics and the ledger go (default: reports/load-<UTC time>)",
    )
    parser.add_argument(
        "--state-dir",
        default=None,
        metavar="DIR",
        help="state directory of `lakestack local` (default: the one it uses)",
    )
    # The spellings before the flags were made one vocabulary across commands; gone in the next release.
    add_deprecated_alias(parser, "--target", "--stack")
    add_deprecated_alias(parser, "--target-rate", "--rate")
    add_deprecated_alias(parser, "--run-time", "--duration")
    parser.set_defaults(handler=run_load)


def _batch_size(value: str) -> int:
    # Checked here, before the target is looked up: a flag's mistake is named first.
    number = positive_int(value)
    if number > 500:
        raise argparse.ArgumentTypeError(f"expected 1 to 500 (the PutRecords entry limit), found {number}")
    return number


def _workers(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, found {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, found {number}")
    return number


def _run_time(value: str) -> str:
    """The run's length as Locust's --run-time takes it, checked here so a typo is a usage error rather than Locust's."""
    duration(value)
    return value.strip()


def resolve_target(target: str, *, state_dir: str | None = None) -> Target:
    """Stream, region and endpoint of ``target`` ('local' or a stack name).

    Raises:
        TargetError: the emulator is not running, or the stack outputs lack the stream or region.
    """
    if target == "local":
        from lakestack.emulator import read_state

        state = read_state() if state_dir is None else read_state(Path(state_dir))
        if state is None:
            raise TargetError(
                "--stack local: expected a running emulator, found none. Start it with `lakestack local up`."
            )
        # The emulator's own (dummy) credentials and endpoint, so Locust needs nothing from the shell.
        environment = state.environment() if hasattr(state, "environment") else {}
        return Target(state.stream_name, state.region, state.endpoint_url, dict(environment))
    from lakestack.stacks import stack_outputs

    outputs = stack_outputs(target, command=f"load --stack {target}")
    if outputs.get("eventhubs_namespace") or outputs.get("kafka_bootstrap"):
        return _event_hubs_target(target, outputs, os.environ)
    missing = [key for key in ("stream_name", "region") if not outputs.get(key)]
    if missing:
        raise TargetError(
            f"--stack {target}: expected stack outputs stream_name and region, found {sorted(outputs)} "
            f"(missing {', '.join(missing)}). Run `pulumi up` on that stack, or check its name."
        )
    return Target(str(outputs["stream_name"]), str(outputs["region"]), outputs.get("endpoint_url") or None)


def _event_hubs_target(stack: str, outputs: dict[str, Any], environ: Mapping[str, str]) -> Target:
    """An Azure stack: the hub and the namespace's Kafka endpoint from its outputs, the secret from the shell.

    Raises:
        TargetError: the hub is not in the outputs, or the send connection string is not in the environment.
    """
    hub = outputs.get("stream_name") or outputs.get("eventhub_name")
    namespace = outputs.get("eventhubs_namespace")
    bootstrap = outputs.get("kafka_bootstrap") or (
        f"{namespace}.servicebus.windows.net:9093" if namespace else None
    )
    if not hub or not bootstrap:
        raise TargetError(
            f"--stack {stack}: expected the Azure stack outputs stream_name (the hub) and eventhubs_namespace or "
            f"kafka_bootstrap, found {sorted(outputs)}. Run `pulumi up` on that stack, or check its name."
        )
    if not environ.get(CONNECTION_STRING_VARIABLE):
        vault, secret = (
            outputs.get("key_vault_name") or "<vault>",
            outputs.get("send_secret_name") or "<secret>",
        )
        raise TargetError(
            f"--stack {stack}: Event Hubs takes the namespace's send connection string, which stays in Key Vault "
            f"(never a stack output). Export it first: export {CONNECTION_STRING_VARIABLE}=$(az keyvault secret "
            f"show --vault-name {vault} --name {secret} --query value -o tsv)"
        )
    return Target(str(hub), str(outputs.get("region") or ""), None, eventhubs_bootstrap=str(bootstrap))


def build_commands(
    args: argparse.Namespace, target: Target, out_dir: Path
) -> tuple[list[str], list[list[str]]]:
    """The master (or single) Locust command and the worker commands for ``args``."""
    extra: list[str] = []
    workers: list[list[str]] = []
    if args.workers:
        port = free_port()
        extra += distributed_extra(workers=args.workers, master_port=port)
        locustfile = EVENTHUBS_LOCUSTFILE if target.eventhubs_bootstrap else LOCUSTFILE
        workers = [worker_command(master_port=port, locustfile=locustfile) for _ in range(args.workers)]
    command = LocustRun(
        stream=target.stream,
        region=target.region,
        endpoint_url=target.endpoint_url,
        ledger_dir=str(out_dir / "ledger"),
        scenario=args.scenario,
        users=args.users,
        spawn_rate=args.spawn_rate or args.users,
        run_time=None if args.shape else args.duration,
        max_events=args.max_events,
        target_rate=args.rate,
        batch_size=args.batch_size,
        csv_prefix=str(out_dir / "locust"),
        html=str(out_dir / "locust.html"),
        extra=extra,
        eventhubs_bootstrap=target.eventhubs_bootstrap,
        shape=args.shape,
        # A shape decides when the run ends: it runs for --duration.
        shape_duration_s=duration(args.duration) if args.shape else None,
    ).argv()
    if args.web:
        command.remove("--headless")
        command += ["--web-host", "127.0.0.1", "--autostart"]
    return command, workers


def run_load(args: argparse.Namespace) -> int:
    """Handler of ``lakestack load``: resolve the target, run Locust (and its workers), return its status."""
    target = resolve_target(args.stack, state_dir=args.state_dir)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.out_dir or f"reports/load-{stamp}")
    out_dir.mkdir(parents=True, exist_ok=True)
    command, worker_commands = build_commands(args, target, out_dir)
    where = target.eventhubs_bootstrap or target.endpoint_url or target.region
    print(f"load: {args.scenario} events to {target.stream} ({where}); output {out_dir}")
    env = {**os.environ, **target.environment}
    master = subprocess.Popen(command, env=env)
    workers = [subprocess.Popen(argv, env=env) for argv in worker_commands]
    try:
        status = master.wait()
    finally:
        for worker in workers:
            try:
                worker.wait(timeout=WORKER_EXIT_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                worker.terminate()
    return status
