"""The soak's arithmetic: samples over time, slopes per hour after warm-up, and pass/fail against budgets.

Everything here is pure (samples in, verdicts out), so the budgets are tested with literal tables of samples;
:mod:`lakestack.soak_sampler` takes the samples from a running pipeline.

A sample is one moment (seconds since the soak started) and a flat mapping of named series to values, e.g.
``rss_mib``, ``checkpoint_files:fraud``, ``table_files:bronze``, ``latency_p95_s``. The series' prefixes say
which budget applies:

- ``checkpoint_files:<query>``: flat after warm-up. Spark, the sources and the pipelines keep the newest
  ``retain`` batches' files, so a checkpoint stops growing once ``retain`` batches have run. The count after
  warm-up may never exceed its value at the end of warm-up by more than one retention window (the files of
  ``retain`` batches, at the files per batch the checkpoint gained during warm-up, at least one).
- ``table_files:<table>``: bounded by the compaction policy. Files pile up between two maintenance runs and
  drop after each: what every run after warm-up leaves (its files after) may not exceed what the first one
  left by more than 25% (+2 files), so the table is a saw-tooth with a flat floor, not a ramp. (Judged on
  the runs' own counts: samples land anywhere on the saw-tooth.)
- ``rss_mib``: grows by less than 5% per hour after warm-up (least-squares slope over the samples after
  warm-up, against the value at the end of warm-up).
- latency: p95 of event-to-visible over the last window after warm-up at most 20% above the first window's.
  The window is 10 minutes, or a third of the time after warm-up when that is shorter (short soaks).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakestack.report import percentile

DEFAULT_WARMUP_S = 300.0
LATENCY_WINDOW_S = 600.0
RSS_GROWTH_PCT_PER_HOUR = 5.0
LATENCY_GROWTH = 0.20
TABLE_PEAK_GROWTH = 0.25
TABLE_PEAK_SLACK = 2

CHECKPOINT_FILES = "checkpoint_files:"
TABLE_FILES = "table_files:"
RSS = "rss_mib"


@dataclass(frozen=True)
class Sample:
    """One sample: ``t_s`` seconds since the soak started, and each series' value then."""

    t_s: float
    values: Mapping[str, float]


@dataclass(frozen=True)
class Budget:
    """One budget's verdict: what was checked, the limit, what was found, and whether it passed."""

    name: str
    series: str
    limit: str
    found: str
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "series": self.series,
            "limit": self.limit,
            "found": self.found,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class SoakResult:
    """The soak's samples, each series' slope per hour after warm-up, and the budgets' verdicts."""

    samples: tuple[Sample, ...]
    warmup_s: float
    slopes_per_hour: Mapping[str, float | None]
    budgets: tuple[Budget, ...]
    latency_window_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return bool(self.budgets) and all(b.ok for b in self.budgets)

    @property
    def failed(self) -> list[str]:
        return [f"{b.name} ({b.series})" for b in self.budgets if not b.ok]

    def series_names(self) -> list[str]:
        return list(dict.fromkeys(name for s in self.samples for name in s.values))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "warmup_s": self.warmup_s,
            "latency_window_s": self.latency_window_s,
            "samples": len(self.samples),
            "failed": self.failed,
            "budgets": [b.to_dict() for b in self.budgets],
            "slopes_per_hour": dict(self.slopes_per_hour),
            "series": {
                name: [[s.t_s, s.values.get(name)] for s in self.samples] for name in self.series_names()
            },
            "notes": list(self.notes),
        }


def warmup_for(duration_s: float, warmup_s: float | None = None) -> float:
    """The warm-up: as asked, else 5 minutes or a sixth of the run, whichever is shorter."""
    if warmup_s is not None:
        return warmup_s
    return min(DEFAULT_WARMUP_S, duration_s / 6)


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, in value per hour; None with fewer than 2 times."""
    if len({t for t, _ in points}) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    num = sum((t - mean_t) * (v - mean_v) for t, v in points)
    den = sum((t - mean_t) ** 2 for t, _ in points)
    return num / den * 3600.0


def series(samples: Sequence[Sample], name: str, *, since_s: float = 0.0) -> list[tuple[float, float]]:
    """``name``'s (t, value) points from ``since_s`` on (samples without the series are left out)."""
    return [(s.t_s, float(s.values[name])) for s in samples if s.t_s >= since_s and name in s.values]


def _at_warmup(points: Sequence[tuple[float, float]], warmup_s: float) -> tuple[float, float] | None:
    """The last point at or before the end of warm-up (the first point when none is)."""
    before = [p for p in points if p[0] <= warmup_s]
    return before[-1] if before else (points[0] if points else None)


def checkpoint_budget(
    samples: Sequence[Sample], query: str, *, warmup_s: float, retain: int, batches: str | None = None
) -> Budget:
    """Checkpoint files flat after warm-up: never above the warm-up value + one retention window.

    Args:
        batches: the series holding the query's batches run so far (``batches:<query>``), for the files a
            batch adds; without it one file per batch is assumed.
    """
    name = f"{CHECKPOINT_FILES}{query}"
    points = series(samples, name)
    mark = _at_warmup(points, warmup_s)
    after = [v for t, v in points if t > warmup_s]
    if mark is None or not after:
        return Budget("checkpoint files flat", name, "samples after warm-up", "none", False)
    per_batch = 1.0
    if batches is not None:
        done = dict(series(samples, batches))
        first_t, first_files = points[0]
        ran = done.get(mark[0], 0) - done.get(first_t, 0)
        # Files a batch adds, from warm-up's growth: files every checkpoint has once (metadata, owner) aside.
        if ran > 0:
            per_batch = max(1.0, (mark[1] - first_files) / ran)
    allowance = math.ceil(round(per_batch * retain, 6))
    limit = mark[1] + allowance
    peak = max(after)
    return Budget(
        "checkpoint files flat",
        name,
        f"<= {limit:,.0f} (warm-up {mark[1]:,.0f} + {allowance:,} for {retain} batches)",
        f"peak {peak:,.0f}",
        peak <= limit,
    )


def table_budget(
    samples: Sequence[Sample], table: str, *, warmup_s: float, compactions: Sequence[tuple[float, int]]
) -> Budget:
    """Table files bounded by compaction: what each maintenance run after warm-up leaves does not grow.

    Args:
        compactions: the table's maintenance runs, (seconds since start, active files right after the run).
    """
    name = f"{TABLE_FILES}{table}"
    after = [files for t, files in compactions if t > warmup_s]
    peak = max((v for _, v in series(samples, name, since_s=warmup_s)), default=None)
    peak_text = "" if peak is None else f"; sampled peak {peak:,.0f}"
    if not after:
        return Budget(
            "table files bounded", name, "a maintenance run after warm-up", f"none{peak_text}", False
        )
    limit = after[0] * (1 + TABLE_PEAK_GROWTH) + TABLE_PEAK_SLACK
    return Budget(
        "table files bounded",
        name,
        f"<= {limit:,.0f} after each maintenance run (first after warm-up {after[0]:,} + 25% + {TABLE_PEAK_SLACK})",
        f"{max(after):,} at most after {len(after)} run(s){peak_text}",
        max(after) <= limit,
    )


def rss_budget(samples: Sequence[Sample], *, warmup_s: float) -> Budget:
    """RSS of the process tree grows by less than 5% per hour after warm-up."""
    points = series(samples, RSS, since_s=warmup_s)
    mark = _at_warmup(series(samples, RSS), warmup_s)
    slope = slope_per_hour(points)
    if slope is None or mark is None or mark[1] <= 0:
        return Budget("RSS growth", RSS, f"< {RSS_GROWTH_PCT_PER_HOUR:g}%/h", "too few samples", False)
    growth = slope / mark[1] * 100
    return Budget(
        "RSS growth",
        RSS,
        f"< {RSS_GROWTH_PCT_PER_HOUR:g}%/h of {mark[1]:,.0f} MiB",
        f"{growth:+.2f}%/h ({slope:+,.1f} MiB/h)",
        growth < RSS_GROWTH_PCT_PER_HOUR,
    )


def latency_window(duration_s: float, warmup_s: float) -> float:
    """10 minutes, or a third of the time after warm-up for a soak shorter than 30 minutes after it."""
    return min(LATENCY_WINDOW_S, max(0.0, duration_s - warmup_s) / 3)


def latency_budget(
    landed: Sequence[tuple[float, float]], *, warmup_s: float, end_s: float, window_s: float
) -> Budget:
    """p95 latency of the last window at most 20% above the first window after warm-up.

    Args:
        landed: per event, (seconds since the soak started when it became visible, its latency in seconds).
        end_s: where the soak's last window ends.
    """
    first = [lat for t, lat in landed if warmup_s <= t < warmup_s + window_s]
    last = [lat for t, lat in landed if end_s - window_s <= t <= end_s]
    p_first, p_last = percentile(first, 95), percentile(last, 95)
    name = "latency p95 steady"
    if p_first is None or p_last is None:
        return Budget(name, "latency_p95_s", "events in both windows", "an empty window", False)
    limit = p_first * (1 + LATENCY_GROWTH)
    return Budget(
        name,
        "latency_p95_s",
        f"last {window_s:g}s <= {limit:.3f} s (first {window_s:g}s after warm-up {p_first:.3f} s + 20%)",
        f"{p_last:.3f} s ({len(last):,} events; first window {len(first):,})",
        p_last <= limit,
    )


def latency_per_sample(
    sample_times: Sequence[float], landed: Sequence[tuple[float, float]]
) -> list[tuple[float | None, float | None]]:
    """(p50, p95) of the events that became visible in each sample's interval ``(previous, this]``."""
    # Sorted once, each interval is a slice (a long soak has millions of events and thousands of samples).
    ordered = sorted(landed)
    times = [t for t, _ in ordered]
    out: list[tuple[float | None, float | None]] = []
    previous = -math.inf
    for moment in sample_times:
        lo, hi = bisect.bisect_right(times, previous), bisect.bisect_right(times, moment)
        values = [lat for _, lat in ordered[lo:hi]]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        out.append((None if p50 is None else round(p50, 3), None if p95 is None else round(p95, 3)))
        previous = max(previous, moment)
    return out


def evaluate(
    samples: Sequence[Sample],
    *,
    warmup_s: float,
    retain: int,
    compactions: Mapping[str, Sequence[tuple[float, int]]],
    landed: Sequence[tuple[float, float]] = (),
    notes: Sequence[str] = (),
) -> SoakResult:
    """Every budget over the samples; latency from ``landed`` (seconds since start, latency) when given."""
    if not samples:
        return SoakResult(
            samples=(),
            warmup_s=warmup_s,
            slopes_per_hour={},
            budgets=(
                Budget("samples taken", "all", "at least one", "none: the run ended before its load", False),
            ),
            latency_window_s=0.0,
            notes=tuple(notes),
        )
    names = list(dict.fromkeys(name for s in samples for name in s.values))
    budgets: list[Budget] = []
    for name in names:
        if name.startswith(CHECKPOINT_FILES):
            query = name.removeprefix(CHECKPOINT_FILES)
            batches = f"batches:{query}" if f"batches:{query}" in names else None
            budgets.append(
                checkpoint_budget(samples, query, warmup_s=warmup_s, retain=retain, batches=batches)
            )
    for name in names:
        if name.startswith(TABLE_FILES):
            table = name.removeprefix(TABLE_FILES)
            budgets.append(
                table_budget(samples, table, warmup_s=warmup_s, compactions=compactions.get(table, ()))
            )
    if RSS in names:
        budgets.append(rss_budget(samples, warmup_s=warmup_s))
    end_s = max((s.t_s for s in samples), default=0.0)
    window = latency_window(end_s, warmup_s)
    budgets.append(latency_budget(landed, warmup_s=warmup_s, end_s=end_s, window_s=window))
    slopes = {name: _rounded(slope_per_hour(series(samples, name, since_s=warmup_s))) for name in names}
    return SoakResult(
        samples=tuple(samples),
        warmup_s=warmup_s,
        slopes_per_hour=slopes,
        budgets=tuple(budgets),
        latency_window_s=window,
        notes=tuple(notes),
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


__all__ = [
    "Budget",
    "Sample",
    "SoakResult",
    "checkpoint_budget",
    "evaluate",
    "latency_budget",
    "latency_per_sample",
    "latency_window",
    "rss_budget",
    "series",
    "slope_per_hour",
    "table_budget",
    "warmup_for",
]
