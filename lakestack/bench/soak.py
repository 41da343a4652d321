"""``lakestack bench --stack local --soak 30m``: the local bench held at a steady load, with the maintenance job
beside the pipelines, sampled on a schedule and judged against budgets (:mod:`lakestack.soak`).

The load phase is the soak: Locust sends at a constant rate for the soak's length while every pipeline runs;
a thread runs maintenance (compaction and a log checkpoint of bronze and every pipeline table) every
``soak_maintenance_s``; each ``soak_sample_s`` a sample is taken (:class:`~lakestack.soak_sampler.SoakSampler`)
and one status line printed. Latency per sample is read from the bronze table when the soak ends (also after
Ctrl-C, before the emulator stops), so what was sampled is always reported.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from lakestack.bench.lifecycle import Teardown
from lakestack.bench.local import LocalBench
from lakestack.bench.settings import BenchSettings
from lakestack.demo import Progress
from lakestack.report import RunReport
from lakestack.soak import Sample, SoakResult, evaluate, latency_per_sample, warmup_for
from lakestack.soak_sampler import SoakSampler, status_line

# Table folders under the lake that are not pipeline tables.
_NOT_MAINTAINED = frozenset({"_maintenance", "sales_json"})
_STOP_MAINTENANCE_S = 120.0


class SoakBench(LocalBench):
    """A local bench whose load phase is a soak: steady load, maintenance beside it, samples over time."""

    def __init__(
        self,
        settings: BenchSettings,
        show: Progress,
        *,
        critical: Callable[[str], AbstractContextManager[None]] | None = None,
    ) -> None:
        soak_s = settings.soak_s
        if soak_s is None:
            raise ValueError("SoakBench needs settings.soak_s")
        steady = dataclasses.replace(settings, duration_s=soak_s, shape="constant")
        if critical is None:
            super().__init__(steady, show)
        else:
            super().__init__(steady, show, critical=critical)
        self.soak_s: float = soak_s
        self.sample_s = settings.soak_sample_s
        self.warmup_s = warmup_for(soak_s, settings.soak_warmup_s)
        self.maintenance_s = settings.soak_maintenance_every_s
        self.samples: list[Sample] = []
        self.maintenance: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.result: SoakResult | None = None
        self._started: float | None = None
        self._started_epoch = 0.0
        self._next_s = 0.0
        self._sampler: SoakSampler | None = None

    # -- the soak --------------------------------------------------------------------------------------

    def load(self) -> int:
        self._sampler = self._make_sampler()
        stop = threading.Event()
        worker = threading.Thread(target=self._maintain, args=(stop,), name="soak-maintenance", daemon=True)
        self._started, self._started_epoch = time.monotonic(), time.time()
        worker.start()
        try:
            acknowledged = self._run.send_load(on_tick=self._tick)
            # Locust can finish a moment before the last sample is due: that sample is taken now.
            if len(self.samples) < self.planned_samples and self._sampler is not None:
                self._take(time.monotonic() - self._started)
            return acknowledged
        finally:
            stop.set()
            worker.join(timeout=_STOP_MAINTENANCE_S)
            if worker.is_alive():
                self.notes.append(
                    f"maintenance was still running {_STOP_MAINTENANCE_S:.0f}s after the soak ended"
                )

    def _tick(self) -> None:
        if self._started is None or self._sampler is None:
            return
        elapsed = time.monotonic() - self._started
        if elapsed < self._next_s or elapsed > self.soak_s + self.sample_s / 2:
            return
        self._take(elapsed)
        # On the schedule, not after the last sample: a slow sample does not push the next ones back.
        self._next_s = (math.floor(elapsed / self.sample_s) + 1) * self.sample_s

    def _take(self, elapsed: float) -> None:
        assert self._sampler is not None
        sample = self._sampler.sample(elapsed)
        self.samples.append(sample)
        self._run.show.step(status_line(sample, len(self.samples), self.planned_samples))

    @property
    def planned_samples(self) -> int:
        return math.floor(self.soak_s / self.sample_s) + 1

    def _tables(self) -> dict[str, tuple[str, dict[str, str]]]:
        """bronze, and every Delta table the pipelines have created under the run's lake so far."""
        context = self._run.context
        found = {"bronze": (context.bronze, context.storage_options(context.bronze))}
        from jobs._files import delta_tables_under

        for name in delta_tables_under(context.lake, context.storage_options(context.lake)):
            if name not in _NOT_MAINTAINED:
                uri = f"{context.lake.rstrip('/')}/{name}"
                found[name] = (uri, context.storage_options(uri))
        return found

    def _make_sampler(self) -> SoakSampler:
        context = self._run.context
        checkpoints = {name: Path(context.checkpoint(name)) for name in self._run.queries}
        state = checkpoints["fraud"] / "state" if "fraud" in checkpoints else None
        return SoakSampler(checkpoints=checkpoints, tables=self._tables, state_store=state)

    def _maintain(self, stop: threading.Event) -> None:
        """Compaction and a log checkpoint of every table, every ``maintenance_s``, until ``stop``."""
        from jobs.pipelines.maintenance import MaintenanceRunner, MaintenanceSettings

        context = self._run.context
        while not stop.wait(self.maintenance_s):
            tables = self._tables()
            try:
                runner = MaintenanceRunner(
                    MaintenanceSettings(
                        tables=tuple(uri for uri, _ in tables.values()),
                        lake=context.lake,
                        endpoint_url=context.endpoint_url,
                        region=context.region,
                    )
                )
                records = runner.run_once(list(runner.tables))
            except Exception as error:  # a failed run is reported; the soak goes on
                self.notes.append(f"maintenance failed: {type(error).__name__}: {error}")
                continue
            names = {uri: name for name, (uri, _) in tables.items()}
            t_s = round(time.monotonic() - (self._started or time.monotonic()), 1)
            for record in records:
                self.maintenance.append(
                    {
                        "t_s": t_s,
                        "table": names.get(record.table_uri, record.table_uri),
                        "files_before": record.files_before,
                        "files_after": record.files_after,
                        "error": record.error,
                    }
                )

    # -- measuring, also after an interruption ------------------------------------------------------------

    def measure(self) -> RunReport:
        report = super().measure()
        self.finish()
        return report

    def destroy(self) -> Teardown:
        self.finish()
        return super().destroy()

    def kept(self) -> Teardown:
        self.finish()
        return super().kept()

    def finish(self) -> SoakResult:
        """Judge what was sampled (once): latency per sample from bronze, then every budget."""
        if self.result is not None:
            return self.result
        landed: list[tuple[float, float]] = []
        try:
            landed = self._landed()
        except Exception as error:  # what was sampled is still reported
            self.notes.append(f"latency not read from bronze: {type(error).__name__}: {error}")
        latencies = latency_per_sample([s.t_s for s in self.samples], landed)
        samples = [
            Sample(s.t_s, {**s.values, "latency_p50_s": p50, "latency_p95_s": p95})
            if p50 is not None and p95 is not None
            else s
            for s, (p50, p95) in zip(self.samples, latencies, strict=True)
        ]
        from jobs.checkpoint import DEFAULT_BATCHES_TO_RETAIN

        self.result = evaluate(
            samples,
            warmup_s=self.warmup_s,
            retain=DEFAULT_BATCHES_TO_RETAIN,
            compactions=self.compactions(),
            landed=landed,
            notes=[*self._window_notes(), *self.notes],
        )
        return self.result

    def compactions(self) -> dict[str, list[tuple[float, int]]]:
        """Per table, each maintenance run that succeeded: (seconds since start, active files after it)."""
        found: dict[str, list[tuple[float, int]]] = {}
        for run in self.maintenance:
            if not run["error"]:
                found.setdefault(run["table"], []).append((run["t_s"], run["files_after"]))
        return found

    def _window_notes(self) -> list[str]:
        notes = [
            f"warm-up {self.warmup_s:g}s; samples every {self.sample_s:g}s; maintenance (compaction + log "
            f"checkpoint of bronze and every pipeline table) every {self.maintenance_s:g}s "
            f"({len({m['t_s'] for m in self.maintenance})} run(s))"
        ]
        if self.soak_s - self.warmup_s < 1800:
            notes.append(
                "short soak: the latency windows are a third of the time after warm-up instead of 10 minutes, "
                "and slopes per hour are extrapolated from minutes"
            )
        return notes

    def _landed(self) -> list[tuple[float, float]]:
        """Per bronze row with an event time: (seconds since the soak started at its commit, its latency)."""
        if self._started is None or not self._run.has_target:
            return []
        from lakestack.measure import read_bronze

        context = self._run.context
        bronze = read_bronze(context.bronze, context.storage_options(context.bronze))
        start = self._started_epoch
        return [
            (commit - start, commit - event)
            for event, commit in bronze.rows
            if event is not None and commit is not None and commit >= start
        ]
