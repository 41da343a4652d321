"""Print the CLI reference (``docs/reference/cli.md``) from the argparse parsers themselves.

``python -m lakestack.docs_cli > docs/reference/cli.md`` regenerates it; ``tests/test_docs.py`` fails when the
committed file differs from what this prints, so the reference cannot drift from the parsers.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from lakestack.cli import build_parser

# argparse wraps help to the terminal's width; a fixed width makes the output the same on every machine.
HELP_WIDTH = 100

HEADER = """\
# CLI reference

Generated from the argparse parsers by `python -m lakestack.docs_cli > docs/reference/cli.md`; do not edit
by hand (`tests/test_docs.py` fails when this file differs from what the generator prints). Every command
also answers `--help` with the same text.

- [`lakestack`](#lakestack) and each of its subcommands
- [`python -m jobs`](#python--m-jobs): the pipeline jobs a cluster runs (also run here)
"""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``parser`` by name (aliases left out), in the order they were added."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    found[name] = sub
    return found


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``parser``, depth first, with the words that select it (``()`` for the root)."""
    yield path, parser
    for name, sub in subcommands(parser).items():
        yield from walk(sub, (*path, name))


@contextlib.contextmanager
def _fixed_width() -> Iterator[None]:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH + 2)  # argparse takes two off
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def _printed_help(call: Callable[[], object]) -> str:
    """What ``call`` prints on stdout when it prints a help text and exits."""
    out = io.StringIO()
    with _fixed_width(), contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        call()
    return out.getvalue().rstrip() + "\n"


# Modes of a job that have a parser of their own, selected by a flag.
JOB_MODES = {"fraud": ("--optimize",)}


def job_helps() -> list[tuple[str, str]]:
    """(command, its --help text) for ``python -m jobs``, each job, and each job mode in ``JOB_MODES``."""
    from jobs.__main__ import JOBS
    from jobs.__main__ import main as jobs_main

    helps = [("python -m jobs", _printed_help(functools.partial(jobs_main, ["--help"])))]
    for name, (run, _summary) in JOBS.items():
        helps.append((f"python -m jobs {name}", _printed_help(functools.partial(run, ["--help"]))))
        for mode in JOB_MODES.get(name, ()):
            helps.append(
                (f"python -m jobs {name} {mode}", _printed_help(functools.partial(run, [mode, "--help"])))
            )
    return helps


def _section(title: str, text: str) -> str:
    return f"## `{title}`\n\n```text\n{text}```\n"


def render() -> str:
    """The whole CLI reference as Markdown."""
    parts = [HEADER]
    for path, parser in walk(build_parser()):
        title = " ".join(("lakestack", *path))
        parts.append(_section(title, _printed_help(parser.print_help)))
    parts.extend(_section(title, text) for title, text in job_helps())
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the reference on stdout."""
    if argv if argv is not None else sys.argv[1:]:
        print("usage: python -m lakestack.docs_cli > docs/reference/cli.md", file=sys.stderr)
        return 2
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
