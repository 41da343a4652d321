"""argparse value types shared by the subcommands: a bad value is a one-line usage error (exit 2)."""

from __future__ import annotations

import argparse

from lakestack.emulator.faults import FaultSpec, FaultSpecError, parse_fault_spec


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


def fault_spec(value: str) -> FaultSpec:
    """A ``--faults`` spec (``KIND=VALUE,...``), parsed."""
    try:
        return parse_fault_spec(value)
    except FaultSpecError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--faults: ")) from None


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """``--faults SPEC`` and ``--faults-seed N``, shared by ``local up`` and ``demo``."""
    from lakestack.emulator.faults import EXAMPLE, KINDS

    kinds = "; ".join(f"{kind}: {what}" for kind, what in KINDS.items())
    parser.add_argument(
        "--faults",
        type=fault_spec,
        default=None,
        metavar="SPEC",
        help=(
            f"inject AWS faults in the emulator, a comma list of KIND=VALUE (e.g. {EXAMPLE}); shares are 0-1 "
            f"or N%%, latencies N ms or N s. Kinds: {kinds}."
        ),
    )
    parser.add_argument(
        "--faults-seed",
        type=int,
        default=None,
        metavar="N",
        help="seed of the fault generator: the same seed makes the same decisions for the same sequence of "
        "requests (default: a random one, printed in the report)",
    )
