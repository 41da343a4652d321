"""A run over time, as the report plots it: events sent and landed per interval, end-to-end latency
percentiles by commit time, the backlog, micro-batch durations and the cost so far.

:func:`build_timeline` is pure (epoch seconds in, a :class:`Timeline` out); :mod:`lakestack.measure` reads the
inputs from the ledger, the Delta table and the query's checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakestack.stats import percentile

# Interval lengths a reader takes in at a glance; the first one giving at most _TARGET_POINTS intervals wins.
_NICE_INTERVALS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
_TARGET_POINTS = 30


@dataclass(frozen=True)
class Batch:
    """One micro-batch that committed: when its trigger started, how long until its Delta commit, its rows."""

    batch_id: int
    start_s: float
    duration_s: float
    rows: int


@dataclass(frozen=True)
class BatchTiming:
    """A micro-batch as read from storage: trigger start and Delta commit, epoch seconds."""

    batch_id: int
    started: float
    committed: float
    rows: int


@dataclass(frozen=True)
class CostModel:
    """What the run costs: per hour while the stack exists, per event that flows, and what was spent before
    the load started (standing the stack up)."""

    hourly_usd: float = 0.0
    usd_per_event: float = 0.0
    accrued_before_usd: float = 0.0
    note: str = ""


@dataclass(frozen=True)
class Series:
    """A named measurement over time (e.g. a CloudWatch metric), points as (seconds since start, value)."""

    label: str
    unit: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Timeline:
    """The run in intervals of ``interval_s`` seconds from ``started_at`` (the first event sent).

    Per interval ``i`` (covering ``[t_s[i], t_s[i] + interval_s)``): events sent (by ``event_time``), events
    landed (by the commit that made them visible), the latency percentiles of the events landed in it (None
    when nothing landed), the backlog and the cost so far at its end.
    """

    started_at: str
    interval_s: float
    t_s: tuple[float, ...]
    sent: tuple[int, ...]
    landed: tuple[int, ...]
    backlog: tuple[int, ...]
    latency_p50_s: tuple[float | None, ...]
    latency_p95_s: tuple[float | None, ...]
    latency_p99_s: tuple[float | None, ...]
    cost_usd: tuple[float, ...]
    batches: tuple[Batch, ...] = ()
    cost_note: str = ""
    cost_at_start_usd: float = 0.0
    stream_metrics: tuple[Series, ...] = field(default_factory=tuple)

    @property
    def intervals(self) -> int:
        return len(self.t_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nice_interval(span_s: float, *, target_points: int = _TARGET_POINTS) -> float:
    """The shortest readable interval that cuts ``span_s`` into at most ``target_points`` pieces."""
    for candidate in _NICE_INTERVALS_S:
        if span_s / candidate <= target_points:
            return float(candidate)
    return float(_NICE_INTERVALS_S[-1])


def timeline_start(sent: Sequence[float], commits: Sequence[float]) -> float | None:
    """Where a run's time axis starts: its first event sent, or its first commit when nothing was sent."""
    if sent:
        return min(sent)
    return min(commits) if commits else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def build_timeline(
    *,
    sent: Sequence[float],
    landed: Sequence[tuple[float | None, float]],
    batches: Sequence[BatchTiming] = (),
    cost: CostModel | None = None,
    interval_s: float | None = None,
    stream_metrics: Sequence[Series] = (),
) -> Timeline | None:
    """Cut a run into intervals.

    Args:
        sent: epoch seconds of every acknowledged event's ``event_time``.
        landed: per row in the table, (its ``event_time`` or None when the payload had none, the epoch
            seconds of the commit that made it visible).
        batches: the micro-batches that committed (those before the first event sent are left out).
        cost: prices to accrue; none (zero) when None.
        interval_s: interval length; chosen from the run's span when None.
        stream_metrics: series whose times are already seconds since the first event sent.

    Returns:
        None when nothing was sent or landed (there is no time axis).
    """
    commits = [commit for _, commit in landed]
    start = timeline_start(sent, commits)
    if start is None:
        return None
    span = max([*sent, *commits]) - start
    step = interval_s or nice_interval(span)
    count = max(1, math.floor(span / step) + 1)

    def index(moment: float) -> int:
        return min(count - 1, max(0, math.floor((moment - start) / step)))

    sent_per = [0] * count
    for moment in sent:
        sent_per[index(moment)] += 1
    landed_per = [0] * count
    latencies: list[list[float]] = [[] for _ in range(count)]
    for event_time, commit in landed:
        slot = index(commit)
        landed_per[slot] += 1
        if event_time is not None:
            latencies[slot].append(commit - event_time)
    backlog: list[int] = []
    cost_usd: list[float] = []
    pending = 0
    model = cost or CostModel()
    sent_so_far = 0
    for slot in range(count):
        pending += sent_per[slot] - landed_per[slot]
        sent_so_far += sent_per[slot]
        # Landed rows the ledger never saw (e.g. a previous run's) would push this below zero.
        backlog.append(max(0, pending))
        elapsed_h = (slot + 1) * step / 3600
        cost_usd.append(
            round(
                model.accrued_before_usd + model.hourly_usd * elapsed_h + model.usd_per_event * sent_so_far, 6
            )
        )
    return Timeline(
        started_at=datetime.fromtimestamp(start, UTC).isoformat(timespec="milliseconds"),
        interval_s=step,
        t_s=tuple(slot * step for slot in range(count)),
        sent=tuple(sent_per),
        landed=tuple(landed_per),
        backlog=tuple(backlog),
        latency_p50_s=tuple(_rounded(percentile(values, 50)) for values in latencies),
        latency_p95_s=tuple(_rounded(percentile(values, 95)) for values in latencies),
        latency_p99_s=tuple(_rounded(percentile(values, 99)) for values in latencies),
        cost_usd=tuple(cost_usd),
        batches=tuple(
            Batch(
                batch_id=batch.batch_id,
                start_s=round(batch.started - start, 3),
                duration_s=round(batch.committed - batch.started, 3),
                rows=batch.rows,
            )
            for batch in sorted(batches, key=lambda b: b.batch_id)
            # Triggers that committed before the first event (the table's creation) are not the run's.
            if batch.committed >= start
        ),
        cost_note=model.note,
        cost_at_start_usd=model.accrued_before_usd,
        stream_metrics=tuple(stream_metrics),
    )
