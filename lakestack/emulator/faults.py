"""Fault specs for the embedded emulator: what AWS does to a pipeline, as a comma list of ``KIND=VALUE``.

``put-throttle=0.2,get-throttle=0.1,kinesis-5xx=0.02,iterator-expiry=0.01,s3-503=0.05,s3-latency=200ms``

Shares are a fraction (``0.2``) or a percentage (``20%``) of the requests (or PutRecords entries) a kind
applies to; latencies are a duration (``200ms``, ``0.5s``) added to every request of that service.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from lakestack.errors import UserError

ShareKind = Literal["put-throttle", "get-throttle", "kinesis-5xx", "iterator-expiry", "s3-503"]
LatencyKind = Literal["kinesis-latency", "s3-latency"]

# Kind -> what it does, in the order the spec's canonical text and every report lists them.
KINDS: dict[str, str] = {
    "put-throttle": "share of PutRecords entries failed with ProvisionedThroughputExceededException inside a "
    "200 reply (FailedRecordCount > 0); a PutRecord call gets the same error as HTTP 400",
    "get-throttle": "share of GetRecords calls answered HTTP 400 ProvisionedThroughputExceededException",
    "kinesis-5xx": "share of Kinesis calls (any operation) answered InternalFailure (500) or "
    "ServiceUnavailable (503)",
    "iterator-expiry": "share of GetRecords calls answered HTTP 400 ExpiredIteratorException",
    "s3-503": "share of S3 requests answered HTTP 503 SlowDown",
    "kinesis-latency": "delay added to every Kinesis request",
    "s3-latency": "delay added to every S3 request",
}
LATENCY_KINDS = frozenset({"kinesis-latency", "s3-latency"})
# A delay past this would trip client timeouts (botocore's read timeout, object_store's) rather than test
# how a pipeline absorbs slow storage.
MAX_LATENCY_S = 10.0
EXAMPLE = "put-throttle=0.2,get-throttle=0.1,s3-503=0.05,s3-latency=200ms"

_SHARE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(%?)$")
_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ms|s)$")


class FaultSpecError(UserError):
    """A ``--faults`` spec that cannot be parsed; the message names the item and what was expected."""


@dataclass(frozen=True)
class FaultSpec:
    """Parsed faults: a share (0-1) per error kind, seconds per latency kind; zero means off."""

    put_throttle: float = 0.0
    get_throttle: float = 0.0
    kinesis_5xx: float = 0.0
    iterator_expiry: float = 0.0
    s3_503: float = 0.0
    kinesis_latency: float = 0.0
    s3_latency: float = 0.0

    def value(self, kind: str) -> float:
        """The share (or seconds, for a latency kind) of ``kind``."""
        return float(getattr(self, kind.replace("-", "_")))

    @property
    def kinds(self) -> list[str]:
        """The kinds switched on, in :data:`KINDS` order."""
        return [kind for kind in KINDS if self.value(kind) > 0]

    @property
    def kinesis(self) -> bool:
        return any(not kind.startswith("s3-") for kind in self.kinds)

    @property
    def s3(self) -> bool:
        return any(kind.startswith("s3-") for kind in self.kinds)

    def to_text(self) -> str:
        """The canonical spec (``parse_fault_spec(spec.to_text()) == spec``); empty when nothing is on."""
        items = []
        for kind in self.kinds:
            value = self.value(kind)
            items.append(f"{kind}={value * 1000:g}ms" if kind in LATENCY_KINDS else f"{kind}={value:g}")
        return ",".join(items)

    def __bool__(self) -> bool:
        return bool(self.kinds)


def _share(kind: str, text: str, item: str) -> float:
    match = _SHARE.match(text)
    if match is None:
        raise FaultSpecError(
            f"--faults: {item!r}: expected {kind} to be a share such as 0.2 or 20%, found {text!r}."
        )
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    if value > 1.0:
        raise FaultSpecError(f"--faults: {item!r}: expected a share between 0 and 1 (or 0% to 100%).")
    return value


def _duration(kind: str, text: str, item: str) -> float:
    match = _DURATION.match(text)
    if match is None:
        raise FaultSpecError(
            f"--faults: {item!r}: expected {kind} to be a duration such as 200ms or 0.5s, found {text!r}."
        )
    seconds = float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
    if seconds > MAX_LATENCY_S:
        raise FaultSpecError(
            f"--faults: {item!r}: expected at most {MAX_LATENCY_S:g}s of added latency (longer delays trip "
            "client timeouts instead of testing the pipeline)."
        )
    return seconds


def parse_fault_spec(text: str) -> FaultSpec:
    """Parse ``KIND=VALUE[,KIND=VALUE...]`` (see the module docstring).

    Raises:
        FaultSpecError: an unknown kind, a kind given twice, a value out of range, or an empty spec.
    """
    values: dict[str, float] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        kind, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise FaultSpecError(f"--faults: {item!r}: expected KIND=VALUE, e.g. {EXAMPLE}.")
        if kind not in KINDS:
            raise FaultSpecError(
                f"--faults: unknown fault {kind!r} in {item!r}; expected one of {', '.join(KINDS)}."
            )
        if kind in values:
            raise FaultSpecError(f"--faults: {kind!r} is given twice; give each fault once.")
        parse = _duration if kind in LATENCY_KINDS else _share
        values[kind] = parse(kind, value.lower(), item)
    if not values:
        raise FaultSpecError(f"--faults: expected at least one KIND=VALUE, found {text!r}; e.g. {EXAMPLE}.")
    return FaultSpec(**{kind.replace("-", "_"): value for kind, value in values.items()})
