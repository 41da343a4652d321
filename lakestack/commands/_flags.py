"""How every `lakestack` command's flags read: one help layout, old spellings as hidden aliases, did-you-mean.

The vocabulary, the same in every command: ``--stack NAME`` chooses a stack (``local``: the emulator),
``--rate N`` is events per second, ``--duration TIME`` how long a run loads.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

# The metavar a flag's value gets from its type when the flag names none: `--events N`, never `--events EVENTS`.
_NUMBER_TYPES = (
    "int",
    "positive_int",
    "positive_float",
    "non_negative_float",
    "float",
    "_batch_size",
    "_workers",
)
_TIME_TYPES = ("duration", "_run_time")
# Otherwise from what the flag names: the first match of the dest's ending.
_METAVAR_BY_DEST_END = (
    ("url", "URL"),
    ("_dir", "DIR"),
    ("file", "PATH"),
    ("checkpoint", "PATH"),
    ("table", "URI"),
    ("lake", "URI"),
    ("uri", "URI"),
    ("region", "R"),
    ("stream", "NAME"),
    ("stack", "NAME"),
    ("topic", "NAME"),
    ("trigger", "WHEN"),
    ("position", "WHERE"),
)


class HelpFormatter(argparse.HelpFormatter):
    """Help text with the defaults shown, readable metavars, and examples kept as written.

    Paragraphs are wrapped; a line that starts with two spaces (an example command) is kept verbatim.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph:
                out.append(
                    textwrap.fill(" ".join(paragraph), width, initial_indent=indent, subsequent_indent=indent)
                )
                paragraph.clear()

        for line in text.splitlines():
            if line.startswith("  ") or not line.strip():
                flush()
                out.append(indent + line if line.strip() else "")
            else:
                paragraph.append(line.strip())
        flush()
        return "\n".join(out)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Never split a flag, a fault spec or a host name at its hyphens.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = (
            "default" in text
            or action.default in (None, False, argparse.SUPPRESS, [])
            or not action.option_strings
            or text == argparse.SUPPRESS
        )
        return text if shown else f"{text} (default: %(default)s)"

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        name = getattr(action.type, "__name__", "")
        if name in _NUMBER_TYPES:
            return "N"
        if name in _TIME_TYPES:
            return "TIME"
        dest = action.dest
        return next((metavar for end, metavar in _METAVAR_BY_DEST_END if dest.endswith(end)), "VALUE")


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
