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
from lakestack.report import ReportFiles, RunReport, write_report_files


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
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def run(self) -> RunReport | None:
        return self.outcome.report

    @property
    def ok(self) -> bool:
        """The run completed, every acknowledged event landed exactly once, and teardown completed."""
        return self.outcome.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        run = self.run
        data: dict[str, Any] = run.to_dict() if run is not None else dict.fromkeys(_run_keys())
        data["ok"] = run is not None and run.ok and self.outcome.status == "completed"
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

    def to_text(self) -> str:
        width = max(len(label) for label, _ in self._rows())
        lines = [f"  {label:<{width}}  {value}" for label, value in self._rows()]
        body = [self.run.to_text(), ""] if self.run is not None else []
        return "\n".join([*body, "lakestack bench", *lines, "", self.verdict()])

    def write(self) -> ReportFiles:
        """report.json, report.md, report.html and the plots, in ``report_dir``."""
        return write_report_files(
            self.report_dir,
            data=self.to_dict(),
            markdown=self.to_markdown(),
            timeline=None if self.run is None else self.run.timeline,
            title=f"lakestack bench: stack {self.settings.stack}",
        )
