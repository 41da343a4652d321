"""The stage plot of a run (``stages.png``): one stacked bar per micro-batch, a colour per stage, each bar
labelled with its batch id and row count.

Drawn with matplotlib's object API (``Figure``, no ``pyplot``), like :mod:`lakestack.plots`; without
matplotlib (the ``report`` extra) no plot is drawn and the report says so. :func:`bars` is the data the plot
draws, tested alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.stages import STAGES

COLORS: dict[str, str] = {
    "wait_in_stream": "#1f77b4",
    "planning_and_reading": "#ff7f0e",
    "transfer_into_spark": "#2ca02c",
    "spark_processing": "#d62728",
    "delta_commit": "#9467bd",
    "checkpoint": "#8c564b",
}
LABELS: dict[str, str] = {
    "wait_in_stream": "wait in the stream",
    "planning_and_reading": "planning and reading",
    "transfer_into_spark": "transfer into Spark",
    "spark_processing": "Spark processing",
    "delta_commit": "Delta commit",
    "checkpoint": "checkpoint",
}
_SIZE_IN = (8.0, 4.6)
_DPI = 110
MAX_BARS = 40


def bars(records: Sequence[Mapping[str, Any]], *, max_bars: int = MAX_BARS) -> list[dict[str, Any]]:
    """Per bar, seconds per stage: the batches that carried rows, in run order, averaged in runs of
    consecutive batches when there are more than ``max_bars`` of them (a missing stage counts as 0).

    Each bar also has ``first_batch`` and ``last_batch`` (the batch ids it covers) and ``rows`` (their mean).
    """
    busy = [r for r in records if r.get("rows")]
    if not busy:
        return []
    size = math.ceil(len(busy) / max_bars)
    out: list[dict[str, Any]] = []
    for start in range(0, len(busy), size):
        group = busy[start : start + size]
        bar: dict[str, Any] = {s: sum(float(r.get(s) or 0.0) for r in group) / len(group) for s in STAGES}
        bar["first_batch"] = int(group[0].get("batch_id", start))
        bar["last_batch"] = int(group[-1].get("batch_id", start + len(group) - 1))
        bar["rows"] = round(sum(int(r["rows"]) for r in group) / len(group))
        out.append(bar)
    return out


def unmeasured(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The stages no batch with rows measured (None in every record): the plot leaves them out."""
    busy = [r for r in records if r.get("rows")]
    return [s for s in STAGES if busy and all(r.get(s) is None for r in busy)]


def bar_label(bar: Mapping[str, Any]) -> str:
    """A bar's tick label: its batch id (or id range) over its row count."""
    first, last = bar["first_batch"], bar["last_batch"]
    batch = f"batch {first}" if first == last else f"batches {first}-{last}"
    rows = f"{bar['rows']:,} rows" if first == last else f"~{bar['rows']:,} rows each"
    return f"{batch}\n{rows}"


def write_stage_plot(
    path: Path,
    records: Sequence[Mapping[str, Any]],
    *,
    title: str = "Where each micro-batch's time goes (ingest)",
) -> Path | None:
    """Write the stage plot of ``records`` (as :class:`jobs.stages.StageRecorder` keeps them) to ``path``;
    None (nothing written) when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    data = bars(records)
    missing = unmeasured(records)
    drawn = [s for s in STAGES if s not in missing]
    figure = Figure(figsize=_SIZE_IN, dpi=_DPI, layout="constrained")
    axes = figure.subplots()
    axes.grid(True, axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    axes.set_title(title)
    axes.set_ylabel("seconds")
    if not data:
        axes.text(0.5, 0.5, "no micro-batch carried rows", ha="center", va="center", transform=axes.transAxes)
        axes.set_xticks([])
    else:
        positions = list(range(len(data)))
        level = [0.0] * len(data)
        for stage in drawn:
            heights = [bar[stage] for bar in data]
            axes.bar(positions, heights, bottom=level, width=0.6, color=COLORS[stage], label=LABELS[stage])
            level = [a + b for a, b in zip(level, heights, strict=True)]
        for x, total in zip(positions, level, strict=True):
            axes.annotate(
                f"{total:.1f} s",
                (x, total),
                ha="center",
                va="bottom",
                xytext=(0, 2),
                textcoords="offset points",
                fontsize="small",
            )
        axes.set_xticks(positions, [bar_label(bar) for bar in data], fontsize="small")
        # Headroom for the legend above the tallest bar.
        axes.set_ylim(0, max(level) * 1.4 if max(level) > 0 else 1.0)
        xlabel = "micro-batches that carried rows, in run order"
        if missing:
            xlabel += f"\nnot measured in this run, so not drawn: {', '.join(LABELS[s] for s in missing)}"
        axes.set_xlabel(xlabel)
        axes.legend(loc="upper left", fontsize="small", ncols=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


__all__ = ["COLORS", "LABELS", "bar_label", "bars", "unmeasured", "write_stage_plot"]
