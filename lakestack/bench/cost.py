"""What a bench run will cost, before anything is created, and the guard that refuses a run over budget.

The estimate is an upper bound from the price table (``infra/prices.json``): the stack's hourly cost over the
whole time it exists (standing up, the load, the longest drain, tearing down), every event at the peak rate
for the whole load metered as Kinesis meters it (in 1 KB units per record), and the Fargate load generator
while the load runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from infra.config import StackSettings
from infra.pricing import estimate_hourly_cost
from lakestack.errors import UserError

# Time a cloud bench keeps the stack beyond --duration and the drain: EMR starts and bootstraps a cluster in
# about 8-15 minutes, and `pulumi destroy` waits for it to terminate. Generous on purpose: a guard that
# under-estimates is worse than none.
UP_ALLOWANCE_S = 20 * 60
DESTROY_ALLOWANCE_S = 10 * 60
# Kinesis on-demand meters ingest per record rounded up to the next KB.
METERED_UNIT_BYTES = 1024
GB = 1024**3


class CostLimitError(UserError):
    """The estimate for the run exceeds ``--max-cost``."""


@dataclass(frozen=True)
class RunEstimate:
    """The upper-bound cost of one bench run and what it is made of (USD)."""

    usd: float
    hourly_usd: float
    hours: float
    events: int
    gb_metered: float
    usd_per_gb: float
    lines: dict[str, float]
    notes: tuple[str, ...]

    @property
    def usd_per_event(self) -> float:
        return self.usd_per_gb * self.gb_metered / self.events if self.events else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "usd": self.usd,
            "hourly_usd": self.hourly_usd,
            "hours": self.hours,
            "events": self.events,
            "gb_metered": self.gb_metered,
            "lines": dict(self.lines),
            "notes": list(self.notes),
        }


def metered_bytes(event_bytes: float) -> int:
    """Bytes Kinesis meters for a record of ``event_bytes`` (whole KB, at least one)."""
    return max(1, math.ceil(event_bytes / METERED_UNIT_BYTES)) * METERED_UNIT_BYTES


def estimate_run_cost(
    settings: StackSettings,
    *,
    duration_s: float,
    peak_rate_eps: float,
    event_bytes: float,
    drain_timeout_s: float,
    prices: dict[str, Any] | None = None,
) -> RunEstimate:
    """The most a bench run of ``duration_s`` at up to ``peak_rate_eps`` can cost on ``settings``'s stack.

    Args:
        settings: the stack's validated settings.
        duration_s: how long the load runs.
        peak_rate_eps: the highest total send rate, events/s.
        event_bytes: average payload size of one event.
        drain_timeout_s: the longest the bench waits for the pipelines to catch up.
        prices: a price table; the repository's when None.
    """
    hourly = estimate_hourly_cost(settings, prices=prices)
    if settings.is_local:
        return RunEstimate(0.0, 0.0, 0.0, 0, 0.0, 0.0, {}, hourly.notes)
    stack_s = UP_ALLOWANCE_S + duration_s + drain_timeout_s + DESTROY_ALLOWANCE_S
    hours = stack_s / 3600
    events = math.ceil(peak_rate_eps * duration_s)
    gb = events * metered_bytes(event_bytes) / GB
    lines = {
        "stack_hours": round(hourly.hourly_usd * hours, 4),
        "data": round(hourly.usd_per_gb * gb, 4),
    }
    if hourly.loadgen_hourly_usd is not None:
        lines["load_generator"] = round(hourly.loadgen_hourly_usd * duration_s / 3600, 4)
    notes = (
        f"{hours * 60:.0f} min of the stack at {hourly.hourly_usd:.4f} USD/h: {UP_ALLOWANCE_S // 60} min to stand "
        f"up, {duration_s / 60:g} min of load, up to {drain_timeout_s / 60:g} min of drain, "
        f"{DESTROY_ALLOWANCE_S // 60} min to tear down",
        f"{events:,} events at most ({peak_rate_eps:g}/s for the whole load), metered as {gb:.3f} GB "
        f"({metered_bytes(event_bytes)} bytes each) at {hourly.usd_per_gb:.3f} USD/GB",
        *hourly.notes,
    )
    return RunEstimate(
        usd=round(sum(lines.values()), 4),
        hourly_usd=hourly.hourly_usd,
        hours=round(hours, 4),
        events=events,
        gb_metered=round(gb, 6),
        usd_per_gb=hourly.usd_per_gb,
        lines=lines,
        notes=notes,
    )


def check_budget(estimate: RunEstimate, *, max_cost_usd: float, stack: str) -> None:
    """Refuse a run whose estimate exceeds ``max_cost_usd``.

    Raises:
        CostLimitError: naming the estimate, the limit and the flags that change either.
    """
    if estimate.usd <= max_cost_usd:
        return
    parts = ", ".join(f"{name} {value:.2f}" for name, value in estimate.lines.items())
    raise CostLimitError(
        f"stack {stack}: this run is estimated at up to {estimate.usd:.2f} USD ({parts}), over --max-cost "
        f"{max_cost_usd:.2f} USD. Nothing was created. Shorten --duration, lower --rate or --drain-timeout, "
        "or raise --max-cost if you mean to spend it (`lakestack plan --stack "
        f"{stack}` shows the hourly cost)."
    )
