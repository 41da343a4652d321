"""How every `lakestack` command's flags read: one help layout, old spellings as hidden aliases, did-you-mean.

The vocabulary, the same in every command: ``--stack NAME`` chooses a stack (``local``: the emulator),
``--rate N`` is events per second, ``--duration TIME`` how long a run loads.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from jobs.entry import HelpFormatter

__all__ = ["DeprecatedAlias", "HelpFormatter", "add_deprecated_alias", "did_you_mean", "visible_flags"]


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag, kept for one release: hidden from --help, stores into the new flag's dest and
    says once on stderr which flag to use instead."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new_flag: str, **kwargs: Any) -> None:
        kwargs["help"] = argparse.SUPPRESS
        kwargs["default"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)
        self.new_flag = new_flag

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: note: {option_string} is deprecated and goes in the next release; use {self.new_flag}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, **kwargs: Any) -> None:
    """Accept ``old`` as a hidden alias of the flag ``new`` (same dest, type and checks)."""
    canonical = next(action for action in parser._actions if new in action.option_strings)
    if canonical.type is not None:
        kwargs["type"] = canonical.type
    parser.add_argument(
        old, dest=canonical.dest, metavar=canonical.metavar, action=DeprecatedAlias, new_flag=new, **kwargs
    )


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` did you mean X?`` when ``word`` is close to one of ``choices``; empty otherwise."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7)
    return f"; did you mean {close[0]}?" if close else ""


def visible_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The long flags ``parser`` shows in its --help (hidden aliases left out)."""
    return [
        flag
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
        if flag.startswith("--")
    ]
