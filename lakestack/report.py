"""The run report: reconciliation, latency percentiles and throughput, as JSON, Markdown, HTML and terminal
text, with PNG plots of the run over time (the demo's and the bench's alike)."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestack.fault_report import fault_rows
from lakestack.reconcile import Reconciliation
from lakestack.report_page import LATENCY_NOTE, WAIT_GAP_NOTE, side_by_side
from lakestack.stats import percentile

if TYPE_CHECKING:
    from lakestack.plots import Plot
    from lakestack.timeline import Timeline


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
    # One entry per pipeline the run checked (``ok`` and its figures); ingest's are also the top-level keys.
    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The run over time, for the plots and report.json; not part of the one-line JSON (`to_dict`).
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    # The ingest job's micro-batch stage timings (jobs.stages): ``summary`` (per stage p50/p95/mean over the
    # batches that carried rows), ``batches`` (one record per batch) and ``plot`` (the PNG beside the report).
    stages: dict[str, Any] | None = None

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
        """Every acknowledged event landed once, and every pipeline checked passed."""
        return (
            self.missing == 0 and self.duplicates == 0 and all(p.get("ok") for p in self.pipelines.values())
        )

    @property
    def failed_pipelines(self) -> list[str]:
        return [name for name, figures in self.pipelines.items() if not figures.get("ok")]

    def to_dict(self, *, batches: bool = False) -> dict[str, Any]:
        """The report as JSON-ready data: the summary (what the one-line ``--json`` prints), or with
        ``batches`` also every micro-batch's stage record (what report.json keeps)."""
        data = asdict(self)
        data.pop("timeline", None)
        if not batches and data["stages"] is not None:
            data["stages"] = {k: v for k, v in data["stages"].items() if k != "batches"}
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
        checked = [name for name in self.pipelines if name != "ingest"]
        if self.ok:
            also = f"; pipelines ok: {', '.join(checked)}" if checked else ""
            return f"PASS: every acknowledged event landed exactly once{also}"
        parts = []
        if self.missing:
            parts.append(f"{self.missing} missing (e.g. {', '.join(self.missing_sample)})")
        if self.duplicates:
            parts.append(f"{self.duplicates} duplicated (e.g. {', '.join(self.duplicate_sample)})")
        for name in self.failed_pipelines:
            if name != "ingest":
                parts.append(
                    f"pipeline {name} failed: {', '.join(_failed_checks(self.pipelines[name])) or 'see its figures'}"
                )
        return "FAIL: " + "; ".join(parts)

    def _pipeline_lines(self) -> list[str]:
        lines: list[str] = []
        for name, figures in self.pipelines.items():
            if name == "ingest":
                continue
            lines += [
                "",
                f"pipeline {name}: {'ok' if figures.get('ok') else 'FAILED'}",
                *self._pipeline_block(name),
            ]
        return lines

    def _pipeline_block(self, name: str) -> list[str]:
        figures = self.pipelines[name]
        flat = [(k, v) for k, v in figures.items() if k != "ok" and not isinstance(v, dict)]
        width = max((len(k) for k, _ in flat), default=0)
        lines = [f"  {key:<{width}}  {_shown(value)}" for key, value in flat]
        for group in side_by_side({k: v for k, v in figures.items() if isinstance(v, dict) and v}):
            if len(group) == 1:
                [(key, value)] = group.items()
                lines += [f"  {key}:", *_table(value)]
            else:
                lines += [f"  {' vs '.join(group)}:", *_table(group)]
        return lines

    def _stage_lines(self) -> list[str]:
        summary = (self.stages or {}).get("summary") or {}
        if not summary:
            return []
        width = max(len(name) for name in summary)
        batches = max(int(s.get("batches", 0)) for s in summary.values())
        lines = ["", f"ingest stages per micro-batch ({batches:,} batches with rows)"]
        lines.append(f"  {'stage':<{width}}  {'p50':>8}  {'p95':>8}  {'mean':>8}")
        for name, figures in summary.items():
            lines.append(
                f"  {name:<{width}}  {figures['p50_s']:>7.3f}s  {figures['p95_s']:>7.3f}s  {figures['mean_s']:>7.3f}s"
            )
        return lines

    def to_text(self) -> str:
        width = max(len(label) for label, _ in self._rows())
        lines = [f"  {label:<{width}}  {value}" for label, value in self._rows()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(
            [
                "lakestack run report",
                *lines,
                *self._stage_lines(),
                *self._pipeline_lines(),
                "",
                self.verdict(),
            ]
        )

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
        stage_lines = self._stage_lines()
        if stage_lines:
            lines += ["", "## Where the time goes (ingest)", "", "```", *stage_lines[1:], "```"]
            plot = (self.stages or {}).get("plot")
            if plot:
                lines += ["", f"![stage time per micro-batch]({plot})"]
            lines += [
                "",
                "Stages: `wait_in_stream` (arrival to the start of the plan that read it, trigger wait included), "
                "`planning_and_reading` (the source's latestOffset: listing shards and planning their ranges; the executors read the records during the write), "
                "`transfer_into_spark` (rows from the source into Spark and out as Arrow), `spark_processing` "
                "(Spark's own planning and scheduling), `delta_commit` (transaction lookup and append), "
                "`checkpoint` (Spark's offset and commit logs).",
                "",
                LATENCY_NOTE,
            ]
            if "wait_in_stream" not in (self.stages or {}).get("summary", {}):
                lines += ["", WAIT_GAP_NOTE]
        for name, figures in self.pipelines.items():
            if name == "ingest":
                continue
            lines += ["", f"## Pipeline {name}: {'ok' if figures.get('ok') else 'FAILED'}", "", "```"]
            lines += [line[2:] for line in self._pipeline_block(name)]
            lines += ["```"]
            # A figure naming an image next to the report (e.g. a plot) is shown as one.
            lines += [
                f"\n![{name} {key}]({value})"
                for key, value in figures.items()
                if isinstance(value, str) and value.endswith((".svg", ".png"))
            ]
        lines += [
            "",
            "Latency is measured from each event's `event_time` (set by the generator) to the timestamp of the",
            "Delta commit that made it visible. Throughput is landed events over the time from the first",
            "event to the last commit.",
        ]
        return "\n".join(lines) + "\n"

    def write_stage_plot(self, directory: Path) -> bool:
        """The ingest job's stage plot, which the Markdown report links, into ``directory`` (when recorded);
        False when there was one to draw but matplotlib is missing."""
        if self.stages and self.stages.get("plot") and self.stages.get("batches") is not None:
            from lakestack.stage_plot import write_stage_plot

            directory.mkdir(parents=True, exist_ok=True)
            return write_stage_plot(directory / str(self.stages["plot"]), self.stages["batches"]) is not None
        return True

    def page(self, document: Mapping[str, Any], plots: Sequence[Plot], directory: Path) -> str:
        """The report page (report.html) of ``document`` (report.json's content) and its rendered plots."""
        from lakestack.report_page import render_page

        return render_page(
            document,
            verdict=self.verdict(),
            plots=[(plot.name, plot.title, plot.path.relative_to(directory).as_posix()) for plot in plots],
            base=directory,
            failed={name: _failed_checks(self.pipelines[name]) for name in self.failed_pipelines},
            faults=fault_rows(self.faults) if self.faults else (),
        )

    def write(self, directory: Path, *, settings: Mapping[str, str] | None = None) -> tuple[Path, Path]:
        """Write report.json, report.md, report.html and the plots (``plots/*.png``, the stage plot) into
        ``directory``. ``settings`` (:func:`lakestack.run_facts.run_settings`) head the page and go into
        report.json as ``run_settings``."""
        markdown = self.to_markdown()
        if not self.write_stage_plot(directory):
            markdown = markdown.replace(
                f"![stage time per micro-batch]({(self.stages or {}).get('plot')})",
                "Stage plot not drawn: matplotlib is missing (`pip install 'lakestack[report]'`).",
            )
        data = self.to_dict(batches=True)
        if settings:
            data = {**data, "run_settings": dict(settings)}
        files = write_report_files(
            directory,
            data=data,
            markdown=markdown,
            timeline=self.timeline,
            page=lambda document, plots: self.page(document, plots, directory),
        )
        return files.json, files.markdown


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return "n/a" if value is None else str(value)


def _table(values: dict[str, Any]) -> list[str]:
    """A nested figure (e.g. the JSON-vs-Delta comparison) as aligned rows: one per inner key."""
    columns = [k for k, v in values.items() if isinstance(v, dict)]
    if not columns:
        return [f"    {k}: {_shown(v)}" for k, v in values.items()]
    keys = list(dict.fromkeys(k for c in columns for k in values[c]))
    width = max(len(k) for k in keys)
    lines = [f"    {'':<{width}}  " + "  ".join(f"{c:>12}" for c in columns)]
    lines += [
        f"    {k:<{width}}  " + "  ".join(f"{_shown(values[c].get(k)):>12}" for c in columns) for k in keys
    ]
    lines += [f"    {k}: {_shown(v)}" for k, v in values.items() if not isinstance(v, dict)]
    return lines


def _failed_checks(figures: dict[str, Any]) -> list[str]:
    """The figures of a failed pipeline that say what went wrong."""
    failed = [k for k, v in figures.items() if v is False and k != "ok"]
    failed += [
        f"{k}.{inner}"
        for k, v in figures.items()
        if isinstance(v, dict)
        for inner, flag in v.items()
        if flag is False and inner != "ok"
    ]
    failed += [k for k in ("missing", "duplicates", "unexpected") if figures.get(k)]
    for key, expected in (
        ("quarantined", "expected_quarantined"),
        ("duplicates_removed", "expected_duplicates_removed"),
        ("other_types", "expected_other_types"),
    ):
        if expected in figures and figures.get(key) != figures.get(expected):
            failed.append(f"{key} {figures.get(key)} != {figures.get(expected)}")
    return failed


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`write_report_files` wrote."""

    json: Path
    markdown: Path
    html: Path
    plots: tuple[Plot, ...]


def write_report_files(
    directory: Path,
    *,
    data: Mapping[str, Any],
    markdown: str,
    timeline: Timeline | None,
    title: str = "lakestack run report",
    page: Callable[[Mapping[str, Any], Sequence[Plot]], str] | None = None,
) -> ReportFiles:
    """Render the plots of ``timeline``, then write the report as JSON, Markdown and a self-contained HTML.

    The Markdown links the PNGs under ``plots/``; the HTML embeds them, so it can be mailed or attached alone.
    report.json holds ``data`` plus ``plots`` (their paths) and ``timeline`` (the numbers behind them).
    Without matplotlib (the ``report`` extra) the report says so instead of showing plots. ``page`` renders the
    HTML from report.json's content and the plots (the run report's page); without it the HTML is the Markdown's.
    """
    from lakestack.plots import plots_available, render_plots

    directory.mkdir(parents=True, exist_ok=True)
    plots: list[Plot] = []
    text = markdown.rstrip("\n") + "\n"
    if timeline is not None and plots_available():
        plots = render_plots(timeline, directory / "plots")
        text += plots_markdown(plots, directory)
    elif timeline is not None:
        text += "\n## Plots\n\nNot drawn: matplotlib is missing (`pip install 'lakestack[report]'`).\n"
    json_path, md_path, html_path = (directory / f"report.{ext}" for ext in ("json", "md", "html"))
    document = {
        **data,
        "plots": [str(plot.path.relative_to(directory)) for plot in plots],
        "timeline": None if timeline is None else timeline.to_dict(),
    }
    json_path.write_text(json.dumps(document, indent=2) + "\n")
    md_path.write_text(text)
    html_path.write_text(
        page(document, plots) if page is not None else markdown_to_html(text, base=directory, title=title)
    )
    return ReportFiles(json_path, md_path, html_path, tuple(plots))


def plots_markdown(plots: Sequence[Plot], directory: Path) -> str:
    """A ``## Plots`` section linking each PNG relative to ``directory``."""
    if not plots:
        return ""
    lines = ["", "## Plots", ""]
    for plot in plots:
        lines += [f"![{plot.title}]({plot.path.relative_to(directory).as_posix()})", ""]
    return "\n".join(lines)


_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)$")
_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left}"
    "figure{margin:1.5rem 0}img{max-width:100%}figcaption{color:#555;font-size:.9rem}"
    "code{background:#f4f4f4;padding:0 .2rem}"
)


def _inline(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _image(alt: str, src: str, base: Path | None) -> str:
    path = None if base is None else base / src
    if path is not None and src.endswith(".png") and path.is_file():
        # Embedded, so the HTML file stands alone.
        src = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
        f"<figcaption>{html.escape(alt)}</figcaption></figure>"
    )


def _take(lines: list[str], start: int, keep: Callable[[str], bool]) -> tuple[list[str], int]:
    """The run of lines from ``start`` for which ``keep`` holds, and the index after it."""
    end = start
    while end < len(lines) and keep(lines[end]):
        end += 1
    return lines[start:end], end


def _table_html(block: list[str]) -> str:
    head, rows = _cells(block[0]), [_cells(row) for row in block[2:]]
    return (
        "<table><thead><tr>"
        + "".join(f"<th>{_inline(c)}</th>" for c in head)
        + "</tr></thead>\n<tbody>"
        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in rows)
        + "</tbody></table>"
    )


def _block(lines: list[str], i: int, base: Path | None) -> tuple[str, int]:
    """The HTML of the block starting at line ``i`` (not blank), and the index after it."""
    line = lines[i]
    if line.startswith("```"):
        code, end = _take(lines, i + 1, lambda text: not text.startswith("```"))
        return f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>", end + 1
    if line.startswith("#"):
        level = min(len(line) - len(line.lstrip("#")), 6)
        return f"<h{level}>{_inline(line[level:].strip())}</h{level}>", i + 1
    if line.startswith("|"):
        block, end = _take(lines, i, lambda text: text.startswith("|"))
        return _table_html(block), end
    if line.startswith("- "):
        items, end = _take(lines, i, lambda text: text.startswith("- "))
        return "<ul>" + "".join(f"<li>{_inline(item[2:])}</li>" for item in items) + "</ul>", end
    if match := _IMAGE.match(line.strip()):
        return _image(match["alt"], match["src"], base), i + 1
    paragraph, end = _take(
        lines, i, lambda text: bool(text.strip()) and not text.startswith(("#", "|", "- ", "![", "```"))
    )
    return f"<p>{_inline(' '.join(p.strip() for p in paragraph))}</p>", end


def markdown_to_html(markdown: str, *, title: str, base: Path | None = None) -> str:
    """The report's Markdown as one HTML page: headings, paragraphs, bold, code (inline and fenced), lists,
    tables and images (the subset the reports use; PNGs under ``base`` are embedded as data URIs)."""
    body: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        block, i = _block(lines, i, base)
        body.append(block)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
