"""The run report: reconciliation, latency percentiles and throughput, as JSON, Markdown and terminal text."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lakestack.fault_report import fault_rows
from lakestack.reconcile import Reconciliation


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class RunReport:
    """What a demo or load run produced. `to_dict()` keys are a stable interface (scripts parse them)."""

    events_sent: int
    events_landed: int
    missing: int
    duplicates: int
    unacknowledged: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    throughput_eps: float | None
    send_rate_eps: float | None
    table_uri: str
    files: int
    table_version: int | None
    micro_batches: int
    duration_s: float
    started_at: str
    missing_sample: tuple[str, ...] = ()
    duplicate_sample: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Faults the emulator injected and what the clients counted (lakestack.fault_report); None without faults.
    faults: dict[str, Any] | None = None

    @classmethod
    def build(
        cls,
        reconciliation: Reconciliation,
        *,
        latencies_s: Sequence[float],
        **fields: Any,
    ) -> RunReport:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return cls(
            events_sent=reconciliation.acknowledged,
            events_landed=reconciliation.landed,
            missing=reconciliation.missing,
            duplicates=reconciliation.duplicates,
            unacknowledged=reconciliation.unacknowledged,
            latency_p50_s=rounded(percentile(latencies_s, 50)),
            latency_p95_s=rounded(percentile(latencies_s, 95)),
            latency_p99_s=rounded(percentile(latencies_s, 99)),
            missing_sample=reconciliation.missing_sample,
            duplicate_sample=reconciliation.duplicate_sample,
            **fields,
        )

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.duplicates == 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    def _rows(self) -> list[tuple[str, str]]:
        def secs(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.3f} s"

        def rate(value: float | None) -> str:
            return "n/a" if value is None else f"{value:,.0f} events/s"

        return [
            ("events acknowledged by the stream", f"{self.events_sent:,}"),
            ("events landed in the table", f"{self.events_landed:,}"),
            ("missing", f"{self.missing:,}"),
            ("duplicates", f"{self.duplicates:,}"),
            ("landed but never acknowledged", f"{self.unacknowledged:,}"),
            ("end-to-end latency p50", secs(self.latency_p50_s)),
            ("end-to-end latency p95", secs(self.latency_p95_s)),
            ("end-to-end latency p99", secs(self.latency_p99_s)),
            ("send rate (acknowledged)", rate(self.send_rate_eps)),
            ("throughput (landed)", rate(self.throughput_eps)),
            ("micro-batches", f"{self.micro_batches:,}"),
            ("table", self.table_uri),
            ("table version / data files", f"{self.table_version} / {self.files}"),
            ("run time", f"{self.duration_s:.1f} s"),
            *(fault_rows(self.faults) if self.faults else []),
        ]

    def verdict(self) -> str:
        if self.ok:
            return "PASS: every acknowledged event landed exactly once"
        parts = []
        if self.missing:
            parts.append(f"{self.missing} missing (e.g. {', '.join(self.missing_sample)})")
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicated (e.g. {', '.join(self.duplicate_sample)})")
        return "FAIL: " + "; ".join(parts)

    def to_text(self) -> str:
        width = max(len(label) for label, _ in self._rows())
        lines = [f"  {label:<{width}}  {value}" for label, value in self._rows()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(["lakestack run report", *lines, "", self.verdict()])

    def to_markdown(self) -> str:
        lines = [
            f"# lakestack run report ({self.started_at})",
            "",
            f"**{self.verdict()}**",
            "",
            "| measure | value |",
            "|---|---|",
            *[f"| {label} | {value} |" for label, value in self._rows()],
        ]
        if self.notes:
            lines += ["", "## Notes", "", *[f"- {note}" for note in self.notes]]
        lines += [
            "",
            "Latency is measured from each event's `event_time` (set by the generator) to the timestamp of the",
            "Delta commit that made it visible. Throughput is landed events over the time from the first",
            "event to the last commit.",
        ]
        return "\n".join(lines) + "\n"

    def write(self, directory: Path) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        json_path, md_path = directory / "report.json", directory / "report.md"
        json_path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        md_path.write_text(self.to_markdown())
        return json_path, md_path
