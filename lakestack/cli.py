"""`lakestack`: the kit's one command. Every subcommand has --help; user mistakes exit 2 with one clear line."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from lakestack.commands import bench, demo, ingest, load, local, stacks, sweep
from lakestack.errors import LakestackError


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors, like every other mistake the command reports (--help still
    prints the usage). Subcommands' parsers are of the same class."""

    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> _Parser:
    """The ``lakestack`` argument parser with every subcommand registered."""
    parser = _Parser(
        prog="lakestack",
        description=(
            "Stand up, load-test and benchmark streaming lakehouse pipelines (Kinesis/Event Hubs -> Spark -> "
            "Delta Lake), locally on an embedded emulator or on AWS/Azure with Pulumi."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for command in (demo, bench, local, ingest, load, stacks, sweep):
        command.register(subparsers)
    parser.commands = dict(subparsers.choices)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    # The packages the tool drives raise their own typed errors; each says what to do, so each is one line.
    from infra.errors import InfraError
    from jobs.errors import JobError
    from loadtest.errors import LoadTestError

    return (LakestackError, JobError, InfraError, LoadTestError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 a run failed, 2 a usage error)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Named by the subcommand they were given to, whose --help lists what it takes.
        parser.commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.handler(args))
    except _known_errors() as error:
        print(f"lakestack {args.command}: error: {error}", file=sys.stderr)
        return int(getattr(error, "exit_code", 2))
    except KeyboardInterrupt:
        print(f"lakestack {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        return _report_unexpected(args.command, error)


def _report_unexpected(command: str, error: Exception) -> int:
    """An error none of our packages raised on purpose: one line on the terminal, the trace in a file.

    A file system error naming a path is most often a path the user gave (``--state-dir``, ``--reports-dir``,
    ``--out-dir``) that cannot be written: exit 2. Anything else is a failure of the tool: exit 1.
    """
    from jobs.errors import one_line

    kept = _keep_trace(command, error)
    where = f"the full trace is in {kept}" if kept else "the trace could not be kept"
    if isinstance(error, OSError) and error.filename:
        print(
            f"lakestack {command}: error: {error.strerror or one_line(error)}: {error.filename}. Check that path "
            f"(a folder this user may create and write, e.g. for --state-dir, --reports-dir, --out-dir); {where}.",
            file=sys.stderr,
        )
        return 2
    print(
        f"lakestack {command}: error: it failed: {type(error).__name__}: {one_line(error)}. This is not a "
        f"mistake of yours; {where}.",
        file=sys.stderr,
    )
    return 1


def _keep_trace(command: str, error: Exception) -> Path | None:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(tempfile.gettempdir()) / "lakestack" / f"{command}-{stamp}-{os.getpid()}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
    except OSError:
        return None
    return path


if __name__ == "__main__":
    sys.exit(main())
