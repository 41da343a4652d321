"""`lakestack`: the kit's one command. Every subcommand has --help; user mistakes exit 2 with one clear line."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from lakestack import __version__
from lakestack.commands import bench, demo, ingest, load, local, stacks, sweep
from lakestack.commands._flags import HelpFormatter, did_you_mean, visible_flags
from lakestack.errors import LakestackError

_INVALID_CHOICE = re.compile(
    r"argument (?P<arg>\S+): invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)"
)

EXAMPLES = """examples:
  lakestack demo                          the whole pipeline on this machine, then a report
  lakestack plan --stack dev              a stack's shape, cost and security, no cloud needed
  lakestack up --stack dev                create it (shows the plan and asks first)
  lakestack load --stack dev --rate 500   send 500 events/s to it
  lakestack down --stack dev              destroy it (asks first)

`lakestack <command> --help` shows each command's flags and an example."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors, like every other mistake the command reports (--help still
    prints the usage). Subcommands' parsers are of the same class, with the same help layout."""

    commands: dict[str, argparse.ArgumentParser]

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            # Most often the required flag was given, misspelt: name the nearest one.
            flags = visible_flags(self)
            typo = next(
                (
                    w
                    for w in getattr(self, "_words", [])
                    if w.startswith("--") and w.partition("=")[0] not in flags
                ),
                "",
            )
            if typo:
                message += f"; {typo.partition('=')[0]} is not a flag of this command{did_you_mean(typo.partition('=')[0], flags)}"
        choice = _INVALID_CHOICE.fullmatch(message)
        if choice and choice["arg"] in {"<command>", "{up,status,down}"}:
            # A mistyped command: the list is in --help; the nearest one is what the user most likely meant.
            choices = re.findall(r"'([^']*)'", choice["choices"])
            word = choice["word"]
            message = (
                f"unknown command {word!r}{did_you_mean(word, choices)} (commands: {', '.join(choices)})"
            )
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> _Parser:
    """The ``lakestack`` argument parser with every subcommand registered."""
    parser = _Parser(
        prog="lakestack",
        description=(
            "Stand up, load-test and benchmark streaming lakehouse pipelines (Kinesis/Event Hubs -> Spark -> "
            "Delta Lake), locally on an embedded emulator or on AWS/Azure with Pulumi."
        ),
        epilog=EXAMPLES,
    )
    parser.add_argument("--version", action="version", version=f"lakestack {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for command in (demo, bench, local, ingest, load, stacks, sweep):
        command.register(subparsers)
    parser.commands = dict(subparsers.choices)
    return parser


def _deepest_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser that took the last command word in ``args`` (``local up``'s for `local up`)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, sub.dest, None) if sub else None
        if sub is None or chosen not in sub.choices:
            return parser
        parser = sub.choices[chosen]


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
        command = _deepest_parser(parser, args)
        flag = next((word.partition("=")[0] for word in unknown if word.startswith("--")), "")
        hint = did_you_mean(flag, visible_flags(command)) if flag else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    try:
        return int(args.handler(args))
    except _known_errors() as error:
        print(f"lakestack {args.command}: error: {error}", file=sys.stderr)
        return int(getattr(error, "exit_code", 2))
    except KeyboardInterrupt:
        print(f"lakestack {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`lakestack plan | head`): what it read is all it wanted, as for any Unix tool.
        # Standard output points at /dev/null so the interpreter's flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
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
