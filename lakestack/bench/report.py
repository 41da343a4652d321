"""The bench report: the run report (the demo's, with its plots) plus what only a bench has: the stack, the
load plan, the cost estimate, how the run ended and whether teardown completed."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakestack.bench.cost import RunEstimate
from lakestack.bench.lifecycle import Outcome
from lakestack.bench.settings import BenchSettings
from lakestack.report import ReportFiles, RunReport, plots_markdown, write_report_files
from lakestack.soak import SoakResult


def _run_keys() -> list[str]:
    """The keys of a run report's JSON (the demo's keys), to keep them when the run never got measured."""
    return [f.name for f in dataclasses.fields(RunReport) if f.name != "timeline"]


@dataclass(frozen=True)
class BenchReport:
    """Everything a bench run produced; ``to_dict()`` keys are a stable interface (scripts parse them)."""

    settings: BenchSettings
    report_dir: Path
    estimate: RunEstimate
    outcome: Outcome
    facts: Mapping[str, Any] = field(default_factory=dict)
    # A soak's samples and budgets (``--soak``); None for a plain bench.
    soak: SoakResult | None = None
    # Maintenance runs beside a soak: one entry per table and run.
    maintenance: tuple[Mapping[str, Any], ...] = ()
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def run(self) -> RunReport | None:
        return self.outcome.report

    @property
    def ok(self) -> bool:
        """The run completed, every acknowledged event landed exactly once, teardown completed, and a soak's
        every budget passed."""
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        """The outcome's (0, 1, or 128 + signal); a completed soak with a failed budget is 1."""
        code = self.outcome.exit_code
        if code == 0 and self.soak is not None and not self.soak.ok:
            return 1
        return code

    def to_dict(self, *, batches: bool = False) -> dict[str, Any]:
        """The one-line ``--json`` summary, or with ``batches`` also the ingest job's per-batch stage records
        (what report.json keeps)."""
        run = self.run
        data: dict[str, Any] = run.to_dict(batches=batches) if run is not None else dict.fromkeys(_run_keys())
        data["ok"] = run is not None and run.ok and self.outcome.status == "completed"
        if self.soak is not None:
            data["ok"] = data["ok"] and self.soak.ok
            data["soak"] = {**self.soak.to_dict(), "maintenance": [dict(m) for m in self.maintenance]}
        return {
            **data,
            "stack": self.settings.stack,
            "report_dir": str(self.report_dir),
            "estimated_cost_usd": self.estimate.usd,
            "teardown": self.outcome.teardown.summary(),
            "outcome": self.outcome.summary(),
            "phases_s": dict(self.outcome.phases),
            "load": {
                "shape": self.settings.shape,
                "duration_s": self.settings.duration_s,
                "users": self.settings.users,
                "rate_eps": self.settings.rate,
            },
            "max_cost_usd": self.settings.max_cost_usd,
            "cost_estimate": self.estimate.as_dict(),
            "target": dict(self.facts),
        }

    def verdict(self) -> str:
        run, outcome = self.run, self.outcome
        if outcome.status != "completed":
            head = f"{outcome.status.upper()}: {outcome.detail}"
        elif run is not None:
            head = run.verdict()
        else:
            head = "FAIL: no report"
        if self.soak is not None:
            soak = self.soak
            head += (
                "; soak budgets met"
                if soak.ok
                else f"; soak budgets FAILED: {', '.join(soak.failed) or 'none judged'}"
            )
        teardown = outcome.teardown
        tail = "teardown complete" if teardown.complete else f"teardown {teardown.summary()}"
        return f"{head}; {tail}"

    def _rows(self) -> list[tuple[str, str]]:
        settings, outcome = self.settings, self.outcome
        phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in outcome.phases.items()) or "none"
        rows = [
            ("stack", settings.stack),
            ("load", settings.load_summary()),
            ("estimated cost", f"up to {self.estimate.usd:.2f} USD (limit {settings.max_cost_usd:.2f} USD)"),
            ("outcome", outcome.summary()),
            ("phases finished", phases),
            ("teardown", outcome.teardown.summary()),
        ]
        rows += [(str(key), str(value)) for key, value in self.facts.items() if not isinstance(value, dict)]
        return rows

    def to_markdown(self) -> str:
        lines = [
            f"# lakestack bench: stack {self.settings.stack} ({self.started_at})",
            "",
            f"**{self.verdict()}**",
            "",
            "| bench | |",
            "|---|---|",
            *[f"| {label} | {value} |" for label, value in self._rows()],
        ]
        if self.estimate.notes:
            lines += ["", "Cost estimate:", "", *[f"- {note}" for note in self.estimate.notes]]
        lines += self._stream_section()
        lines += self._soak_section()
        if self.run is not None:
            # The run report follows as a section of this one.
            run_text = self.run.to_markdown().splitlines()
            lines += ["", "## Run", *run_text[1:]]
        return "\n".join(lines) + "\n"

    def _stream_section(self) -> list[str]:
        """The stream's own counts (CloudWatch, AWS only) beside what the ledger acknowledged."""
        stream = self.facts.get("cloudwatch")
        if not isinstance(stream, Mapping):
            return []

        def count(key: str) -> str:
            value = stream.get(key)
            return "n/a" if value is None else f"{value:,.0f}"

        acknowledged = "n/a" if self.run is None else f"{self.run.events_sent:,}"
        return [
            "",
            "## The stream (CloudWatch)",
            "",
            "| measure | value |",
            "|---|---|",
            f"| records put (IncomingRecords) | {count('incoming_records')} (the ledger acknowledged {acknowledged}) |",
            f"| highest reader lag (GetRecords.IteratorAgeMilliseconds) | {count('max_iterator_age_ms')} ms |",
            f"| writes throttled (WriteProvisionedThroughputExceeded) | {count('write_throttled_records')} |",
            f"| reads throttled (ReadProvisionedThroughputExceeded) | {count('read_throttled_calls')} |",
        ]

    def _soak_section(self) -> list[str]:
        soak = self.soak
        if soak is None:
            return []
        lines = [
            "",
            "## Soak",
            "",
            f"{len(soak.samples)} samples; warm-up {soak.warmup_s:g} s; latency windows {soak.latency_window_s:g} s. "
            f"**{'Every budget met' if soak.ok else 'Failed: ' + ', '.join(soak.failed)}.**",
            "",
            "| budget | series | limit | found | verdict |",
            "|---|---|---|---|---|",
            *[
                f"| {b.name} | `{b.series}` | {b.limit} | {b.found} | {'pass' if b.ok else '**FAIL**'} |"
                for b in soak.budgets
            ],
            "",
            "Slope per hour of each series after warm-up (least squares):",
            "",
            "| series | last value | slope per hour |",
            "|---|---|---|",
        ]
        last = soak.samples[-1].values if soak.samples else {}
        for name, slope in soak.slopes_per_hour.items():
            shown = "n/a" if slope is None else f"{slope:+,.3f}"
            lines.append(f"| `{name}` | {last.get(name, 'n/a')} | {shown} |")
        if self.maintenance:
            runs = len({m["t_s"] for m in self.maintenance})
            failed = [m for m in self.maintenance if m.get("error")]
            lines += [
                "",
                f"Maintenance ran {runs} time(s) over {len(self.maintenance)} table run(s); "
                f"{len(failed)} failed.",
            ]
        if soak.notes:
            lines += ["", *[f"- {note}" for note in soak.notes]]
        return lines

    def soak_text(self) -> list[str]:
        """The budget table for the terminal."""
        soak = self.soak
        if soak is None:
            return []
        lines = ["", f"soak: {len(soak.samples)} samples, warm-up {soak.warmup_s:g} s"]
        for b in soak.budgets:
            lines.append(
                f"  {'pass' if b.ok else 'FAIL'}  {b.name:<22} {b.series:<36} {b.found}  (limit {b.limit})"
            )
        return lines

    def to_text(self) -> str:
        width = max(len(label) for label, _ in self._rows())
        lines = [f"  {label:<{width}}  {value}" for label, value in self._rows()]
        body = [self.run.to_text(), ""] if self.run is not None else []
        return "\n".join([*body, "lakestack bench", *lines, *self.soak_text(), "", self.verdict()])

    def write(self) -> ReportFiles:
        """report.json, report.md, report.html and the plots (a soak's and the stage plot too), in
        ``report_dir``."""
        markdown = self.to_markdown()
        if self.run is not None:
            self.run.write_stage_plot(self.report_dir)
        if self.soak is not None and self.soak.samples:
            from lakestack.plots import plots_available

            if plots_available():
                from lakestack.soak_plots import render_soak_plots

                plots = render_soak_plots(self.soak, self.report_dir / "plots")
                markdown = (
                    markdown.rstrip("\n")
                    + "\n"
                    + plots_markdown(plots, self.report_dir).replace("## Plots", "## Soak plots", 1)
                )
        return write_report_files(
            self.report_dir,
            data=self.to_dict(batches=True),
            markdown=markdown,
            timeline=None if self.run is None else self.run.timeline,
            title=f"lakestack bench: stack {self.settings.stack}",
        )
