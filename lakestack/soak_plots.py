"""PNG plots of a soak's samples over time, one per group of series, with the end of warm-up marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lakestack.plots import Plot
from lakestack.soak import series

if TYPE_CHECKING:
    from lakestack.soak import SoakResult

_SIZE_IN = (8.0, 4.2)
_DPI = 110
# name, title, y label, the series' prefixes (or exact names)
_GROUPS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("soak_rss", "Resident memory of the process tree (lakestack, Spark JVM, Python workers, emulator)", "MiB",
     ("rss_mib",)),
    ("soak_checkpoint_files", "Checkpoint files per query", "files", ("checkpoint_files:",)),
    ("soak_checkpoint_mib", "Checkpoint size per query", "MiB", ("checkpoint_mib:",)),
    ("soak_table_files", "Active files per Delta table (latest snapshot)", "files", ("table_files:",)),
    ("soak_delta_log", "_delta_log size per Delta table", "MiB", ("delta_log_mib:",)),
    ("soak_state_store", "Fraud state store (files under the checkpoint's state/)", "MiB / files",
     ("state_store_mib", "state_store_files")),
    ("soak_latency", "End-to-end latency (event time to bronze commit) of events landed per sample interval",
     "seconds", ("latency_p50_s", "latency_p95_s")),
)  # fmt: skip


def render_soak_plots(result: SoakResult, directory: Path) -> list[Plot]:
    """One PNG per group that has data, into ``directory`` (created)."""
    from matplotlib.figure import Figure

    directory.mkdir(parents=True, exist_ok=True)
    names = result.series_names()
    plots: list[Plot] = []
    for file_name, title, unit, prefixes in _GROUPS:
        chosen = [n for n in names if any(n == p or (p.endswith(":") and n.startswith(p)) for p in prefixes)]
        if not chosen:
            continue
        figure = Figure(figsize=_SIZE_IN, dpi=_DPI, layout="constrained")
        axes = figure.subplots()
        axes.grid(True, alpha=0.3)
        for name in chosen:
            points = series(result.samples, name)
            label = name.split(":", 1)[1] if ":" in name else name
            axes.plot([t for t, _ in points], [v for _, v in points], "o-", markersize=3, label=label)
        axes.axvline(result.warmup_s, color="#888888", linestyle="--", linewidth=1, label="end of warm-up")
        axes.set_xlabel("time since the soak started (s)")
        axes.set_ylabel(unit)
        axes.set_ylim(bottom=0)
        axes.legend(loc="best", fontsize="small")
        axes.set_title(title, fontsize="medium")
        path = directory / f"{file_name}.png"
        figure.savefig(path, format="png")
        plots.append(Plot(file_name, title, path))
    return plots
