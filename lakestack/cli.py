"""`lakestack`: the kit's one command. Every subcommand has --help; user mistakes exit 2 with one clear line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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


if __name__ == "__main__":
    sys.exit(main())
