"""`lakestack`: the kit's one command. Every subcommand has --help; user mistakes exit 2 with one clear line."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from infra import local
from infra.errors import InfraError, UserError

JAVA_INSTALL_HINT = (
    "install a Java 17+ runtime: 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu), "
    "'sudo dnf install java-17-openjdk-headless' (Fedora/RHEL) or 'brew install openjdk@17' (macOS), "
    "or point JAVA_HOME at one"
)


def find_java(environ: os._Environ[str] | dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    return shutil.which("java", path=env.get("PATH", ""))


def check_java(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """Return the Java major version, or raise UserError naming the package to install."""
    java = find_java(environ)
    if java is None:
        raise UserError(
            f"Spark (pyspark 4.0) needs Java 17 or newer and no 'java' was found; {JAVA_INSTALL_HINT}."
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UserError(f"could not run {java} -version ({error}); {JAVA_INSTALL_HINT}.") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise UserError(f"could not read the Java version from {java} -version; {JAVA_INSTALL_HINT}.")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < 17:
        raise UserError(
            f"Spark (pyspark 4.0) needs Java 17 or newer; {java} is Java {major}. {JAVA_INSTALL_HINT}."
        )
    return major


# --- local ---------------------------------------------------------------------------------------------------


def _print_env(state: local.EmulatorState) -> None:
    print("# emulator-only credentials; paste into your shell to point AWS tools at the emulator:")
    for key, value in state.environment().items():
        print(f"export {key}={value}")


def _local_up(args: argparse.Namespace) -> int:
    state = local.up(port=args.port, state_dir=Path(args.state_dir))
    print(f"emulator up: {state.endpoint_url} (pid {state.pid}, log {state.log_path})")
    print(f"  stream  {state.stream_name} (on-demand, region {state.region})")
    for role, bucket in state.buckets.items():
        print(f"  bucket  s3://{bucket} ({role})")
    if state.port != local.DEFAULT_PORT:
        print(
            f"note: Pulumi.local.yaml points its providers at port {local.DEFAULT_PORT}; edit it to use {state.port}."
        )
    _print_env(state)
    return 0


def _local_status(args: argparse.Namespace) -> int:
    state = local.read_state(Path(args.state_dir))
    if state is None:
        print("emulator: not running (start it with `lakestack local up`)")
        return 1
    if args.json:
        print(json.dumps({**state.__dict__, "table_uri": state.table_uri}))
        return 0
    print(f"emulator: running at {state.endpoint_url} (pid {state.pid}, since {state.started_at})")
    print(f"  stream  {state.stream_name}; buckets: {', '.join(state.buckets.values())}")
    _print_env(state)
    return 0


def _local_down(args: argparse.Namespace) -> int:
    state = local.down(Path(args.state_dir))
    print(
        "emulator: nothing was running" if state is None else f"emulator stopped (was {state.endpoint_url})"
    )
    return 0


def _add_local(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "local",
        help="embedded emulator (moto server: Kinesis + S3 on 127.0.0.1)",
        description="Start, inspect or stop the embedded AWS emulator with the local stack's stream and buckets.",
    )
    parser.add_argument(
        "--state-dir",
        default=str(local.DEFAULT_STATE_DIR),
        help="where the emulator's state file and log live (default: %(default)s)",
    )
    actions = parser.add_subparsers(dest="action", metavar="{up,status,down}", required=True)
    up = actions.add_parser("up", help="start the emulator and create the local stack's stream and buckets")
    up.add_argument(
        "--port", type=int, default=local.DEFAULT_PORT, help="port on 127.0.0.1 (default: %(default)s)"
    )
    up.set_defaults(handler=_local_up)
    status = actions.add_parser("status", help="say whether the emulator runs, and where")
    status.add_argument("--json", action="store_true", help="print the state as one JSON object")
    status.set_defaults(handler=_local_status)
    down = actions.add_parser("down", help="stop the emulator (its data is gone with it)")
    down.set_defaults(handler=_local_down)


# --- demo and ingest -----------------------------------------------------------------------------------------


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, found {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, found {number}")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, found {value}")
    return number


def _demo(args: argparse.Namespace) -> int:
    check_java()
    from infra.demo import DemoSettings, run_demo

    settings = DemoSettings(
        events=args.events,
        rate=args.rate,
        users=args.users,
        port=args.port,
        reports_dir=Path(args.reports_dir),
        keep_emulator=args.keep_emulator,
        max_records_per_shard=args.max_records_per_shard,
    )
    report = run_demo(settings)
    if args.json:
        print(report.to_json())
    return 0 if report.ok else 1


def _add_demo(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole pipeline on this machine and report missing/duplicates/latency",
        description=(
            "Start the emulator, send synthetic sales events with Locust, ingest them with Spark into a Delta "
            "bronze table, reconcile, and write reports/<timestamp>/report.{json,md}. Exit 1 when any event "
            "is missing or duplicated."
        ),
    )
    parser.add_argument(
        "--events", type=_positive_int, default=10_000, help="events to send (default: %(default)s)"
    )
    parser.add_argument(
        "--rate",
        type=_positive_float,
        default=1_000.0,
        help="target send rate, events/s (default: %(default)s)",
    )
    parser.add_argument("--users", type=_positive_int, default=4, help="Locust users (default: %(default)s)")
    parser.add_argument("--port", type=int, default=None, help="emulator port (default: a free one)")
    parser.add_argument("--reports-dir", default="reports", help="where reports go (default: %(default)s)")
    parser.add_argument(
        "--max-records-per-shard",
        type=_positive_int,
        default=10_000,
        help="ingest cap per shard per micro-batch (default: %(default)s)",
    )
    parser.add_argument(
        "--keep-emulator",
        action="store_true",
        help="leave the emulator running afterwards to inspect the table",
    )
    parser.add_argument(
        "--json", action="store_true", help="also print the report as one JSON line, last on stdout"
    )
    parser.set_defaults(handler=_demo)


def _ingest(args: argparse.Namespace) -> int:
    check_java()
    from jobs import ingest

    return ingest.run(ingest.settings_from_args(args))


def _add_ingest(subparsers: argparse._SubParsersAction) -> None:
    from jobs import ingest

    parser = subparsers.add_parser(
        "ingest",
        help="run the ingest job (Kinesis -> bronze Delta table) here; same as `python -m jobs ingest`",
        description="Read a Kinesis stream and append every record exactly once to a bronze Delta table.",
    )
    ingest.add_arguments(parser)
    parser.set_defaults(handler=_ingest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakestack",
        description=(
            "Stand up, load-test and benchmark streaming lakehouse pipelines (Kinesis/Event Hubs -> Spark -> "
            "Delta Lake), locally on an embedded emulator or on AWS/Azure with Pulumi."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    _add_demo(subparsers)
    _add_local(subparsers)
    _add_ingest(subparsers)
    from infra.stack_cli import register as register_stack
    from loadtest.cli import register as register_load

    register_load(subparsers)
    register_stack(subparsers)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from jobs.errors import JobError
    from loadtest.errors import LoadTestError

    return (JobError, InfraError, LoadTestError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except _known_errors() as error:
        print(f"lakestack {args.command}: error: {error}", file=sys.stderr)
        return int(getattr(error, "exit_code", 2))
    except KeyboardInterrupt:
        print(f"lakestack {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
