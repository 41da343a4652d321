"""What one `lakestack bench` run is asked to do, validated once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lakestack.emulator.faults import FaultSpec
from lakestack.errors import UserError
from loadtest.shapes import SHAPES

DEFAULT_DURATION_S = 300.0
DEFAULT_MAX_COST_USD = 5.0
DEFAULT_DRAIN_TIMEOUT_S = 600.0
DEFAULT_SOAK_SAMPLE_S = 60.0
DEFAULT_SOAK_MAINTENANCE_S = 300.0


@dataclass(frozen=True)
class BenchSettings:
    """One bench run.

    Attributes:
        stack: the stack (``Pulumi.<stack>.yaml``); ``local`` runs on the embedded emulator.
        duration_s: how long the load runs.
        max_cost_usd: refuse to start when the estimate is higher.
        shape: the load shape (``loadtest.shapes``), peaking at ``users`` and ``rate``.
        users: the most Locust users at once.
        rate: the most events/s, all users together.
        keep: leave the stack (or the emulator) up afterwards.
        reports_dir: where the run's folder goes.
        drain_timeout_s: the longest to wait for the pipelines to catch up after the load.
        port: the emulator's port (local only; a free one when None).
        max_records_per_shard: ingest cap per shard per micro-batch (local only).
        pipelines: the demo's pipelines to run (local only; every one when None; a cloud stack runs its
            ``lakestack:pipelines``).
        soak_s: a soak (local only): steady load this long with maintenance beside the pipelines, sampled
            every ``soak_sample_s``, judged against budgets after ``soak_warmup_s`` (None: 5 minutes or a
            sixth of the soak); maintenance runs every ``soak_maintenance_s``.
        faults: faults the emulator injects (local only; None: none), as ``lakestack demo --faults``.
        faults_seed: the seed of the fault generator (local only; None: a random one, in the report).
    """

    stack: str
    duration_s: float = DEFAULT_DURATION_S
    max_cost_usd: float = DEFAULT_MAX_COST_USD
    shape: str = "ramp"
    users: int = 4
    rate: float = 1_000.0
    keep: bool = False
    reports_dir: Path = Path("reports")
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    port: int | None = None
    max_records_per_shard: int = 10_000
    pipelines: tuple[str, ...] | None = None
    soak_s: float | None = None
    soak_sample_s: float = DEFAULT_SOAK_SAMPLE_S
    soak_warmup_s: float | None = None
    soak_maintenance_s: float | None = None
    faults: FaultSpec | None = None
    faults_seed: int | None = None

    def __post_init__(self) -> None:
        problems = [
            (self.duration_s <= 0, f"--duration: expected a time above 0, found {self.duration_s:g}s"),
            (self.max_cost_usd < 0, f"--max-cost: expected USD >= 0, found {self.max_cost_usd:g}"),
            (self.shape not in SHAPES, f"--shape: expected one of {', '.join(SHAPES)}, found {self.shape!r}"),
            (self.users < 1, f"--users: expected at least 1, found {self.users}"),
            (self.rate <= 0, f"--rate: expected events/s above 0, found {self.rate:g}"),
            (
                self.drain_timeout_s <= 0,
                f"--drain-timeout: expected a time above 0, found {self.drain_timeout_s:g}s",
            ),
        ]
        if self.soak_s is not None:
            problems += self._soak_problems(self.soak_s)
        for failed, message in problems:
            if failed:
                raise UserError(message)

    @property
    def soak_maintenance_every_s(self) -> float:
        """How often a soak runs maintenance: as asked, else every 5 minutes, or more often in a short soak
        (three runs in the time after warm-up)."""
        if self.soak_maintenance_s is not None:
            return self.soak_maintenance_s
        from lakestack.soak import warmup_for

        soak_s = self.soak_s or 0.0
        judged_s = soak_s - warmup_for(soak_s, self.soak_warmup_s)
        return min(DEFAULT_SOAK_MAINTENANCE_S, max(1.0, round(judged_s / 3, 1)))

    def _soak_problems(self, soak_s: float) -> list[tuple[bool, str]]:
        from lakestack.soak import warmup_for

        warmup = self.soak_warmup_s
        warmup_ok = warmup is None or 0 <= warmup < soak_s
        every = self.soak_maintenance_every_s if warmup_ok else 1.0
        judged_s = soak_s - warmup_for(soak_s, warmup) if warmup_ok and soak_s > 0 else 0.0
        return [
            (soak_s <= 0, f"--soak: expected a time above 0, found {soak_s:g}s"),
            (
                not 0 < self.soak_sample_s <= soak_s / 2,
                f"--soak-sample: expected a time above 0 and at most half of --soak ({soak_s:g}s) so there are "
                f"at least 3 samples, found {self.soak_sample_s:g}s",
            ),
            (
                warmup is not None and not 0 <= warmup < soak_s,
                f"--soak-warmup: expected a time from 0 to below --soak ({soak_s:g}s), found {warmup or 0:g}s",
            ),
            (
                every <= 0,
                f"--soak-maintenance: expected a time above 0, found {every:g}s",
            ),
            (
                0 < every and warmup_ok and every > judged_s / 2,
                f"--soak-maintenance: a run every {every:g}s leaves fewer than two maintenance "
                f"runs in the {judged_s:g}s after warm-up, so the table budget cannot be judged; pick at most "
                f"{judged_s / 2:g}s, or a longer --soak",
            ),
        ]

    def load_summary(self) -> str:
        if self.soak_s is not None:
            summary = (
                f"soak: constant load for {self.soak_s:g}s at {self.rate:,.0f} events/s per scenario "
                f"({self.users} users), sampled every {self.soak_sample_s:g}s, maintenance every "
                f"{self.soak_maintenance_every_s:g}s"
            )
        else:
            summary = f"{self.shape} shape for {self.duration_s:g}s, up to {self.users} users and {self.rate:,.0f} events/s"
        if self.faults is not None and self.faults.kinds:
            summary += f", injecting faults {self.faults.to_text()}"
        return summary
