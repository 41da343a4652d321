"""`lakestack local up | status | down`: the embedded emulator with the local stack's stream and buckets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lakestack import emulator
from lakestack.commands._types import add_fault_arguments
from lakestack.errors import EmulatorError


def _print_env(state: emulator.EmulatorState) -> None:
    print("# emulator-only credentials; paste into your shell to point AWS tools at the emulator:")
    for key, value in state.environment().items():
        print(f"export {key}={value}")


def _up(args: argparse.Namespace) -> int:
    state = emulator.up(
        port=args.port, state_dir=Path(args.state_dir), faults=args.faults, faults_seed=args.faults_seed
    )
    print(f"emulator up: {state.endpoint_url} (pid {state.pid}, log {state.log_path})")
    print(f"  stream  {state.stream_name} (on-demand, region {state.region})")
    for role, bucket in state.buckets.items():
        print(f"  bucket  s3://{bucket} ({role})")
    if state.faults:
        print(f"  faults  {state.faults} (seed {state.faults_seed}); counts: `lakestack local status`")
    if state.port != emulator.DEFAULT_PORT:
        print(
            f"note: Pulumi.local.yaml points its providers at port {emulator.DEFAULT_PORT}; edit it to use {state.port}."
        )
    _print_env(state)
    return 0


def _status(args: argparse.Namespace) -> int:
    state = emulator.read_state(Path(args.state_dir))
    if state is None:
        print("emulator: not running (start it with `lakestack local up`)")
        return 1
    faults = _fault_tally(state)
    if args.json:
        print(json.dumps({**state.__dict__, "table_uri": state.table_uri, "faults": faults}))
        return 0
    print(f"emulator: running at {state.endpoint_url} (pid {state.pid}, since {state.started_at})")
    print(f"  stream  {state.stream_name}; buckets: {', '.join(state.buckets.values())}")
    if faults is None:
        print("  faults  tally unreadable (an emulator from an older lakestack?)")
    elif faults["spec"]:
        _print_faults(faults)
    _print_env(state)
    return 0


def _fault_tally(state: emulator.EmulatorState) -> dict[str, Any] | None:
    try:
        return emulator.read_faults(state.endpoint_url)
    except EmulatorError:
        return None


def _print_faults(faults: dict[str, Any]) -> None:
    from lakestack.fault_report import fault_rows, faults_section

    rows = fault_rows(faults_section(faults, producer=None, source=None))
    width = max(len(label) for label, _ in rows)
    state = "injecting" if faults["armed"] else "stopped"
    print(f"  faults  {state} since {faults['armed_at']}")
    for label, value in rows:
        print(f"    {label:<{width}}  {value}")


def _down(args: argparse.Namespace) -> int:
    state = emulator.down(Path(args.state_dir))
    print(
        "emulator: nothing was running" if state is None else f"emulator stopped (was {state.endpoint_url})"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``local up|status|down`` to the ``lakestack`` command line."""
    parser = subparsers.add_parser(
        "local",
        help="embedded emulator (moto server: Kinesis + S3 on 127.0.0.1)",
        description="Start, inspect or stop the embedded AWS emulator with the local stack's stream and buckets.",
        epilog="examples:\n  lakestack local up\n  lakestack local status --json\n  lakestack local down",
    )
    parser.add_argument(
        "--state-dir",
        default=str(emulator.DEFAULT_STATE_DIR),
        metavar="DIR",
        help="where the emulator's state file and log live",
    )
    actions = parser.add_subparsers(dest="action", metavar="{up,status,down}", required=True)
    up = actions.add_parser(
        "up",
        help="start the emulator and create the local stack's stream and buckets",
        description="Start the emulator and create the local stack's stream and buckets.",
        epilog="examples:\n  lakestack local up\n  lakestack local up --port 4567 --faults put-throttle=0.2",
    )
    up.add_argument("--port", type=int, default=emulator.DEFAULT_PORT, help="port on 127.0.0.1")
    add_fault_arguments(up)
    up.set_defaults(handler=_up)
    status = actions.add_parser(
        "status",
        help="say whether the emulator runs, and where, and count the faults it injected",
        description="Say whether the emulator runs, and where, and count the faults it injected.",
        epilog="example:\n  lakestack local status --json",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print the state as one JSON object (with `faults`: per kind, seen, injected and survived)",
    )
    status.set_defaults(handler=_status)
    down = actions.add_parser(
        "down",
        help="stop the emulator (its data is gone with it)",
        description="Stop the emulator (its data is gone with it).",
        epilog="example:\n  lakestack local down",
    )
    down.set_defaults(handler=_down)
