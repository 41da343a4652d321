"""argparse value types shared by the subcommands: a bad value is a one-line usage error (exit 2)."""

from __future__ import annotations

import argparse
import re

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
    """``--faults SPEC`` and ``--faults-seed N``, shared by ``local up``, ``demo`` and ``bench`` (local only).

    The kinds and their values are documented once, in docs/how-to/faults.md (and in a bad spec's error).
    """
    parser.add_argument(
        "--faults",
        type=fault_spec,
        default=None,
        metavar="SPEC",
        help="inject AWS faults in the emulator, e.g. put-throttle=0.2,s3-latency=200ms; kinds and values: "
        "docs/how-to/faults.md",
    )
    parser.add_argument(
        "--faults-seed",
        type=int,
        default=None,
        metavar="N",
        help="seed of the fault generator: the same seed makes the same decisions for the same sequence of "
        "requests (default: a random one, printed in the report)",
    )


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(value: str) -> float:
    """A time span in seconds, as Locust writes them: ``90``, ``90s``, ``10m``, ``1.5h``, ``1h30m`` (no unit
    means seconds)."""
    text = value.strip()
    parts = _DURATION_PART.findall(text)
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        seconds = float(text)
    elif parts and "".join(number + unit for number, unit in parts) == text:
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    else:
        raise argparse.ArgumentTypeError(f"expected a time such as 90s, 10m, 1h or 1h30m, found {value!r}")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a time above 0, found {value!r}")
    return seconds


def non_negative_float(value: str) -> float:
    """A number of at least 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {value!r}") from None
    if number < 0 or number != number:
        raise argparse.ArgumentTypeError(f"expected a number of at least 0, found {value}")
    return number


def pipeline_names(value: str) -> tuple[str, ...]:
    """The demo's pipeline names separated by commas. ``orders-cow`` and ``orders-mor`` (a stack file's names
    for one layout) name the demo's ``orders``, which always writes both layouts."""
    from lakestack.commands._flags import did_you_mean
    from lakestack.demo_pipelines import PIPELINES

    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected pipeline names separated by commas, found {value!r}")
    known = [*PIPELINES, *_ORDERS_LAYOUTS]
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(
                f"expected names among {', '.join(PIPELINES)} (or {', '.join(_ORDERS_LAYOUTS)}), found "
                f"{name!r}{did_you_mean(name, known)}"
            )
    return tuple(dict.fromkeys("orders" if name in _ORDERS_LAYOUTS else name for name in names))


_ORDERS_LAYOUTS = ("orders-cow", "orders-mor")


# One rule for the orders pipeline's names, in the demo, the bench and stack files (lakestack:pipelines).
PIPELINE_NAMES_HELP = (
    "`orders` means both layouts, orders-cow (copy-on-write) and orders-mor (merge-on-read); a stack file may "
    "deploy one alone, the demo's orders job always writes both side by side, so either name runs it"
)
