"""`lakestack demo --sweep 1000,2000,4000,6000`: the ingest path at each rate for a fixed time, on one emulator
and one Spark, then per rate p50/p95/p99, the rates sent and landed, whether the backlog stayed bounded, and
the sustainable rate (the highest rate that was sent in full and kept its backlog bounded) last.

Each rate sends ``rate x seconds`` events with Locust into the same stream while the same ingest query runs,
then waits until the query has drained before the next rate starts, so no rate inherits another's backlog.
The backlog (acknowledged by the stream, not yet landed) is sampled twice a second while a rate is sent.
Driving the demo's run through the rates is ``lakestack.demo.sweep_rates``; this module measures and reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakestack.reconcile import reconcile
from lakestack.report import percentile

# A rate counts as sent when the stream acknowledged at least this share of it per second.
SENT_SHARE = 0.9
# The backlog is bounded when, over the second half of a rate's sending, its troughs grow by less than this
# share of the rate per second (a pipeline that lands 95% of what arrives grows it by 5% of the rate a second).
GROWTH_SHARE = 0.05
SAMPLE_EVERY_S = 0.5


@dataclass(frozen=True)
class BacklogSample:
    """Seconds since the rate began, events acknowledged by the stream and landed in bronze (this rate's)."""

    t_s: float
    acknowledged: int
    landed: int

    @property
    def backlog(self) -> int:
        return max(0, self.acknowledged - self.landed)


def backlog_growth(samples: Sequence[BacklogSample]) -> float:
    """Events/s by which the backlog's troughs grew from the second to the last quarter of ``samples``.

    Troughs, not the backlog itself: a pipeline that keeps up shows a sawtooth (records pile up between
    commits and drop at each), and where a short window ends on that tooth would decide a fitted slope.
    A pipeline that falls behind raises every trough. 0 with fewer than 8 samples.
    """
    if len(samples) < 8:
        return 0.0
    quarter = len(samples) // 4
    second, last = samples[quarter : 2 * quarter], samples[3 * quarter :]
    low_second, low_last = min(second, key=lambda s: s.backlog), min(last, key=lambda s: s.backlog)
    span = (last[0].t_s + last[-1].t_s) / 2 - (second[0].t_s + second[-1].t_s) / 2
    return (low_last.backlog - low_second.backlog) / span if span > 0 else 0.0


def backlog_bounded(samples: Sequence[BacklogSample], rate: float) -> bool:
    """True when the backlog did not keep growing while ``rate`` was sent (see :data:`GROWTH_SHARE`)."""
    return backlog_growth(samples) < GROWTH_SHARE * rate


@dataclass
class RateResult:
    """One rate of the sweep."""

    target_eps: float
    seconds: float
    acknowledged: int = 0
    landed: int = 0
    missing: int = 0
    duplicates: int = 0
    sent_eps: float | None = None
    landed_eps: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    max_backlog: int = 0
    backlog_growth_eps: float = 0.0
    bounded: bool = False
    drained_s: float | None = None
    stages: dict[str, dict[str, float | int]] = field(default_factory=dict)
    samples: list[BacklogSample] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        """The stream acknowledged the rate (within :data:`SENT_SHARE`)."""
        return self.sent_eps is not None and self.sent_eps >= SENT_SHARE * self.target_eps

    @property
    def sustained(self) -> bool:
        return self.reached and self.bounded and self.missing == 0 and self.duplicates == 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["samples"] = [[s.t_s, s.acknowledged, s.landed] for s in self.samples]
        data["reached"] = self.reached
        data["sustained"] = self.sustained
        return data


def sustainable_rate(results: Sequence[RateResult]) -> float | None:
    """The highest target rate that was sent, landed exactly once and kept its backlog bounded."""
    return max((r.target_eps for r in results if r.sustained), default=None)


def _secs(value: float | None) -> str:
    return "    n/a" if value is None else f"{value:6.2f}s"


def _eps(value: float | None) -> str:
    return "     n/a" if value is None else f"{value:8,.0f}"


def format_sweep(results: Sequence[RateResult]) -> str:
    """The sweep as a table, one line per rate, and the sustainable rate last."""
    seconds = results[0].seconds if results else 0
    lines = [
        f"rate sweep: ingest only, {seconds:g} s per rate, drained between rates",
        "  target/s    sent/s  landed/s      p50      p95      p99  backlog",
    ]
    for r in results:
        backlog = "bounded" if r.bounded else f"GROWING {r.backlog_growth_eps:,.0f}/s"
        sent = "" if r.reached else " (not reached)"
        exact = "" if not (r.missing or r.duplicates) else f"; {r.missing} missing, {r.duplicates} duplicated"
        lines.append(
            f"  {r.target_eps:8,.0f}  {_eps(r.sent_eps)}  {_eps(r.landed_eps)}  {_secs(r.latency_p50_s)}  "
            f"{_secs(r.latency_p95_s)}  {_secs(r.latency_p99_s)}  {backlog} (max {r.max_backlog:,}){sent}{exact}"
        )
    rate = sustainable_rate(results)
    lines.append(
        "sustainable rate: "
        + (
            f"{rate:,.0f} events/s (the highest rate sent in full, landed exactly once, backlog bounded)"
            if rate is not None
            else "none of the rates (see above: not reached, growing backlog, or not exactly once)"
        )
    )
    return "\n".join(lines)


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def measure_rate(
    result: RateResult,
    entries: Sequence[Any],
    landed: Mapping[tuple[str, str], list[int]],
    commit_time: Mapping[int, float],
) -> None:
    """Fill in a rate's reconciliation, rates and latency percentiles from its ledger entries and bronze.

    Args:
        result: the rate (its samples already taken).
        entries: the ledger entries of this rate's Locust run.
        landed: bronze position -> the batch ids of every row at that position (the whole table).
        commit_time: batch id -> epoch seconds of the Delta commit of that batch.
    """
    keys = [(e.shard_id, e.sequence_number) for e in entries]
    found = [f"{s}@{q}" for s, q in keys for _ in landed.get((s, q), ())]
    outcome = reconcile([f"{s}@{q}" for s, q in keys], found)
    result.acknowledged, result.missing, result.duplicates = (
        outcome.acknowledged,
        outcome.missing,
        outcome.duplicates,
    )
    result.landed = outcome.landed
    times = [_epoch(e.event_time) for e in entries]
    latencies: list[float] = []
    commits: list[float] = []
    for entry, event_time in zip(entries, times, strict=True):
        batches = landed.get((entry.shard_id, entry.sequence_number))
        if batches and batches[0] in commit_time:
            commits.append(commit_time[batches[0]])
            latencies.append(commit_time[batches[0]] - event_time)
    if len(times) > 1 and max(times) > min(times):
        result.sent_eps = round(len(times) / (max(times) - min(times)), 1)
    if commits and times and max(commits) > min(times):
        result.landed_eps = round(len(commits) / (max(commits) - min(times)), 1)
    result.latency_p50_s = _rounded(percentile(latencies, 50))
    result.latency_p95_s = _rounded(percentile(latencies, 95))
    result.latency_p99_s = _rounded(percentile(latencies, 99))
    result.max_backlog = max((s.backlog for s in result.samples), default=0)
    result.backlog_growth_eps = round(backlog_growth(result.samples), 1)
    result.bounded = backlog_bounded(result.samples, result.target_eps)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def users_for(rate: float, minimum: int) -> int:
    """Locust users for a rate: one per 1,000 events/s (a user sends one PutRecords at a time), at least
    ``minimum``."""
    return max(minimum, math.ceil(rate / 1000))


def write_sweep(results: Sequence[RateResult], directory: Path) -> Path:
    """``sweep.json`` (every rate with its samples and stage summary, and the sustainable rate) in ``directory``."""
    import json

    path = directory / "sweep.json"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "rates": [r.to_dict() for r in results],
                "sustainable_rate_eps": sustainable_rate(results),
                "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
            indent=2,
        )
        + "\n"
    )
    return path


__all__ = [
    "BacklogSample",
    "RateResult",
    "backlog_bounded",
    "backlog_growth",
    "format_sweep",
    "measure_rate",
    "sustainable_rate",
    "users_for",
    "write_sweep",
]
