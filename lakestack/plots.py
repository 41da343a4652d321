"""PNG plots of a :class:`~lakestack.timeline.Timeline`, for the run report (demo and bench alike).

matplotlib is drawn through its object API (``Figure``, no ``pyplot``): no GUI backend, no global state, so
plotting works on a headless machine and inside any process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from lakestack.timeline import Timeline

_SIZE_IN = (8.0, 4.2)
_DPI = 110
_X_LABEL = "time since the first event was sent (s)"
_MARKERS = {"p50": "o", "p95": "s", "p99": "^"}
_COLORS = {"p50": "#1f77b4", "p95": "#ff7f0e", "p99": "#d62728", "sent": "#1f77b4", "landed": "#2ca02c"}


@dataclass(frozen=True)
class Plot:
    """One rendered plot: a short name, its title (the image's alt text) and where the PNG is."""

    name: str
    title: str
    path: Path


def plots_available() -> bool:
    """True when matplotlib can be imported (it is in the ``report`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=_SIZE_IN, dpi=_DPI, layout="constrained")
    axes = figure.subplots()
    axes.grid(True, alpha=0.3)
    axes.set_xlabel(_X_LABEL)
    return figure, axes


def _empty(axes: Axes, message: str) -> None:
    axes.text(0.5, 0.5, message, ha="center", va="center", transform=axes.transAxes, color="#555555")


def _latency(timeline: Timeline, axes: Axes) -> str:
    title = "End-to-end latency percentiles, by commit time"
    middle = [t + timeline.interval_s / 2 for t in timeline.t_s]
    for name, values in (
        ("p50", timeline.latency_p50_s),
        ("p95", timeline.latency_p95_s),
        ("p99", timeline.latency_p99_s),
    ):
        # Events land in separate micro-batch commits: one marker per interval that had any, no line across
        # the intervals between them (nothing landed there, so there is no latency to draw).
        points = [(x, y) for x, y in zip(middle, values, strict=True) if y is not None]
        axes.plot(
            [x for x, _ in points],
            [y for _, y in points],
            marker=_MARKERS[name],
            linestyle="none",
            markersize=6,
            color=_COLORS[name],
            label=name,
        )
    axes.set_ylabel("latency: event_time to Delta commit (s)")
    highest = max((v for v in timeline.latency_p99_s if v is not None), default=0.0)
    axes.set_ylim(0, highest * 1.2 or 1.0)
    if not any(v is not None for v in timeline.latency_p50_s):
        _empty(axes, "no event landed with a readable event_time")
    axes.legend(loc="best")
    return title


def _edges(timeline: Timeline) -> list[float]:
    return [*timeline.t_s, timeline.t_s[-1] + timeline.interval_s]


def _sent_landed(timeline: Timeline, axes: Axes) -> str:
    step = timeline.interval_s
    edges = _edges(timeline)
    for name, counts in (("sent (acknowledged)", timeline.sent), ("landed in the table", timeline.landed)):
        rates = [count / step for count in counts]
        color = _COLORS["sent" if name.startswith("sent") else "landed"]
        axes.stairs(rates, edges, label=name, color=color, linewidth=1.8)
    axes.set_ylabel("events/s")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left")
    return f"Events sent vs landed, per {step:g} s interval"


def _backlog(timeline: Timeline, axes: Axes) -> str:
    # Each interval shows the count at its end, as a step: no slope drawn between two measurements.
    edges = _edges(timeline)
    axes.stairs(timeline.backlog, edges, alpha=0.25, color="#9467bd", fill=True)
    axes.stairs(timeline.backlog, edges, color="#9467bd", linewidth=1.8, label="sent, not yet landed")
    axes.set_ylabel("events")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left")
    return "Backlog: events acknowledged by the stream, not yet in the table"


def _batches(timeline: Timeline, axes: Axes) -> str:
    title = "Micro-batch durations (trigger start to Delta commit)"
    batches = timeline.batches
    if not batches:
        _empty(axes, "no micro-batch timings (the query's checkpoint was not readable)")
        axes.set_ylabel("duration (s)")
        return title
    rows_axis = axes.twinx()
    width = max(0.5, min(b.duration_s for b in batches) * 0.8)
    rows_axis.bar(
        [b.start_s for b in batches],
        [b.rows for b in batches],
        width=width,
        align="edge",
        color="#bbbbbb",
        alpha=0.6,
        label="rows in the batch",
    )
    rows_axis.set_ylabel("rows in the batch")
    # The durations go on top of the bars.
    axes.set_zorder(rows_axis.get_zorder() + 1)
    axes.patch.set_visible(False)
    # One marker per batch: batches are separate runs, not points on a continuous curve.
    axes.plot(
        [b.start_s for b in batches],
        [b.duration_s for b in batches],
        marker="o",
        linestyle="none",
        markersize=6,
        label="duration",
    )
    axes.set_ylabel("duration (s)")
    # Headroom above the longest batch and the biggest bar, so neither hides under the legend or the frame.
    axes.set_ylim(0, max(b.duration_s for b in batches) * 1.3 or 1.0)
    rows_axis.set_ylim(0, max(b.rows for b in batches) * 1.3 or 1.0)
    handles, labels = axes.get_legend_handles_labels()
    more_handles, more_labels = rows_axis.get_legend_handles_labels()
    axes.legend(handles + more_handles, labels + more_labels, loc="upper left")
    return title


def _cost(timeline: Timeline, axes: Axes) -> str:
    ends = [0.0, *(t + timeline.interval_s for t in timeline.t_s)]
    costs = [timeline.cost_at_start_usd, *timeline.cost_usd]
    # Drawn over the axes' edge: a run that costs nothing still shows its line at 0.
    axes.plot(
        ends,
        costs,
        "-",
        color="#8c564b",
        linewidth=2.5,
        clip_on=False,
        zorder=3,
        label="estimated cost so far",
    )
    top = max(costs)
    axes.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    axes.set_ylabel("USD")
    if timeline.cost_note:
        axes.text(0.99, 0.04, timeline.cost_note, ha="right", transform=axes.transAxes, color="#555555")
    axes.legend(loc="upper left")
    return "Estimated cost so far (list prices)"


def _stream(timeline: Timeline, figure: Figure) -> str:
    series = timeline.stream_metrics
    axes_list = figure.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
    for axes, one in zip(axes_list, series, strict=True):
        axes.grid(True, alpha=0.3)
        axes.plot([p[0] for p in one.points], [p[1] for p in one.points], "o-", markersize=3, label=one.label)
        axes.set_ylabel(one.unit)
        axes.set_ylim(bottom=0)
        axes.legend(loc="upper left", fontsize="small")
    axes_list[-1].set_xlabel(_X_LABEL)
    return "Kinesis stream metrics (CloudWatch, per minute)"


# Report order: the two that answer "how fast, how far behind" first.
_SINGLE: tuple[tuple[str, Callable[[Timeline, Axes], str]], ...] = (
    ("latency", _latency),
    ("backlog", _backlog),
    ("sent_landed", _sent_landed),
    ("batches", _batches),
    ("cost", _cost),
)


def has_cost(timeline: Timeline) -> bool:
    """True when the run cost anything by the estimate (a local run on emulators costs nothing: no plot)."""
    return timeline.cost_at_start_usd > 0 or any(cost > 0 for cost in timeline.cost_usd)


def render_plots(timeline: Timeline, directory: Path) -> list[Plot]:
    """Draw every plot of ``timeline`` into ``directory`` (created) as PNGs; returns them in report order.

    The cost plot is drawn only when the run cost something (not on emulators), the stream plot only when
    the timeline has stream metrics (AWS runs).
    """
    from matplotlib.figure import Figure

    directory.mkdir(parents=True, exist_ok=True)
    plots: list[Plot] = []
    end = timeline.t_s[-1] + timeline.interval_s
    for name, draw in _SINGLE:
        if name == "cost" and not has_cost(timeline):
            continue
        figure, axes = _figure()
        title = draw(timeline, axes)
        # One time axis for every plot, so they read side by side.
        axes.set_xlim(0, end)
        axes.set_title(title)
        plots.append(_save(figure, name, title, directory))
    if timeline.stream_metrics:
        height = 1.0 + 2.0 * len(timeline.stream_metrics)
        figure = Figure(figsize=(_SIZE_IN[0], height), dpi=_DPI, layout="constrained")
        title = _stream(timeline, figure)
        figure.suptitle(title)
        plots.append(_save(figure, "stream", title, directory))
    return plots


def _save(figure: Figure, name: str, title: str, directory: Path) -> Plot:
    path = directory / f"{name}.png"
    figure.savefig(path, format="png")
    return Plot(name, title, path)
