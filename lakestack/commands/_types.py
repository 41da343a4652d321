"""argparse value types shared by the subcommands: a bad value is a one-line usage error (exit 2)."""

from __future__ import annotations

import argparse


def positive_int(value: str) -> int:
    """A whole number of at least 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, found {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, found {number}")
    return number


def positive_float(value: str) -> float:
    """A number above 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, found {value}")
    return number
