"""Copy-on-write vs merge-on-read, measured: the figures of each layout after a run, the time-travel and
change-feed checks, and a plot of latency and files over the run. Used by the demo's orders plug-in and by
``bench/bench_orders.py``.

Every check compares with an oracle that does not share the job's code: the generators' expected final
state, and for the mid-run state a fold of the changes the query saw, by the generator's own rule (the
latest ``order_ts`` per order wins; a delete removes the order).
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

from lakestack.report import percentile

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from jobs.pipelines.orders import BatchReport, Layout, OrdersTables

LAYOUTS: tuple[Layout, ...] = ("cow", "mor")
ORDER_FIELDS = ("order_id", "order_ts", "customer_id", "amount", "status")
_QUERY_RUNS = 3


def iso(moment: Any) -> str:
    """A timestamp as the generators write ``order_ts``: ISO-8601 UTC, microseconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def as_truth_rows(rows: pa.Table) -> list[dict[str, Any]]:
    """Order rows in the shape of the generators' ``expected_state`` (sorted by ``order_id``)."""
    shaped = [{**{k: r[k] for k in ORDER_FIELDS}, "order_ts": iso(r["order_ts"])} for r in rows.to_pylist()]
    return sorted(shaped, key=lambda r: r["order_id"])


def expected_state(truths: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The union of the generators' expected final states (each generator has its own order ids)."""
    rows = [row for truth in truths for row in truth.get("expected_state", [])]
    return sorted(rows, key=lambda r: r["order_id"])


def fold(changes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The orders after ``changes`` by the generator's rule: per order the latest ``order_ts`` wins, a delete
    removes the order. Written apart from the job's CDC code, so it can disagree with it."""
    state: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for change in changes:
        stamp = iso(change["order_ts"])
        current = state.get(change["order_id"])
        if current is None or stamp > current[0]:
            row = (
                None
                if change["op"] == "delete"
                else {**{k: change[k] for k in ORDER_FIELDS}, "order_ts": stamp}
            )
            state[change["order_id"]] = (stamp, row)
    return [row for _, (_, row) in sorted(state.items()) if row is not None]


def apply_change_feed(rows: list[dict[str, Any]], feed: pa.Table) -> list[dict[str, Any]]:
    """``rows`` with a Delta change feed applied in commit order (inserts and post-images set, deletes drop)."""
    state = {r["order_id"]: r for r in rows}
    entries = sorted(feed.to_pylist(), key=lambda r: (r["_commit_version"], r["_change_type"] != "delete"))
    for entry in entries:
        kind = entry["_change_type"]
        if kind == "delete":
            state.pop(entry["order_id"], None)
        elif kind in ("insert", "update_postimage"):
            state[entry["order_id"]] = {
                **{k: entry[k] for k in ORDER_FIELDS},
                "order_ts": iso(entry["order_ts"]),
            }
    return [state[k] for k in sorted(state)]


@dataclass
class LayoutSeries:
    """What one layout did during a run, batch by batch."""

    changes: int = 0
    write_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    # (epoch seconds the batch became readable, median latency of its changes)
    points: list[tuple[float, float]] = field(default_factory=list)


class OrdersRecorder:
    """The orders job's ``on_batch`` callback: keeps each layout's series and every change the query saw."""

    def __init__(self) -> None:
        self.series: dict[Layout, LayoutSeries] = {}
        self.changes_by_batch: dict[int, list[dict[str, Any]]] = {}
        self.change_bytes = 0
        self.bronze_rows = 0
        self.quarantined = 0
        self.other_types = 0
        self.duplicates = 0
        self.applied = 0
        self.started = time.time()

    def __call__(self, report: BatchReport, changes: pa.Table | DataFrame) -> None:
        """Record one micro-batch. The changes come as the job has them: a DataFrame when delta-spark writes the
        layouts (this oracle, not the job, brings their order columns to the driver), or an Arrow table."""
        import pyarrow as pa

        columns = ["change_id", "op", *ORDER_FIELDS]
        if isinstance(changes, pa.Table):
            seen = changes.select(columns)
        else:
            from jobs.lake import to_arrow

            seen = to_arrow(changes.select(*columns))
        self.changes_by_batch.setdefault(report.batch_id, seen.to_pylist())
        self.change_bytes += report.change_bytes
        self.bronze_rows += report.bronze_rows
        self.quarantined += report.quarantined
        self.other_types += report.other_types
        self.duplicates += report.outcome.duplicates
        self.applied += report.outcome.changes
        for layout, outcome in report.outcomes.items():
            series = self.series.setdefault(layout, LayoutSeries())
            latencies = list(report.latencies_s.get(layout, ()))
            series.changes += outcome.changes
            series.write_s += outcome.write_s
            series.latencies_s.extend(latencies)
            if latencies:
                series.points.append((outcome.visible_at, statistics.median(latencies)))

    def changes_through(self, batch_id: int) -> list[dict[str, Any]]:
        return [c for b, changes in sorted(self.changes_by_batch.items()) if b <= batch_id for c in changes]


def _median_time(read: Callable[[], Any]) -> tuple[float, Any]:
    runs, answer = [], None
    for _ in range(_QUERY_RUNS):
        started = time.perf_counter()
        answer = read()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs), answer


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def layout_figures(
    tables: OrdersTables,
    layout: Layout,
    series: LayoutSeries,
    expected: list[dict[str, Any]],
    *,
    change_bytes: int,
    compactions: Sequence[Any] = (),
) -> dict[str, Any]:
    """The issue's figures for one layout after a run (reads each table's log and data once more)."""
    from jobs.pipelines.orders import compaction_status, read_optimized, snapshot

    snapshot_s, rows = _median_time(lambda: snapshot(None, layout, tables))
    written = sum(
        c.bytes_added or 0
        for table in tables.layout_tables(layout).values()
        if table.exists()
        for c in table.commits()
    )
    files = sum(t.file_stats().files for t in tables.layout_tables(layout).values() if t.exists())
    figures: dict[str, Any] = {
        "matches_expected": as_truth_rows(rows) == expected,
        "rows": rows.num_rows,
        "changes": series.changes,
        "write_rows_per_s": _rounded(series.changes / series.write_s if series.write_s else None, 1),
        "latency_p50_s": _rounded(percentile(series.latencies_s, 50)),
        "latency_p95_s": _rounded(percentile(series.latencies_s, 95)),
        "bytes_written": written,
        "write_amplification": _rounded(written / change_bytes if change_bytes else None, 2),
        "files": files,
        "snapshot_query_s": _rounded(snapshot_s, 4),
        "read_optimized_query_s": None,
        "compactions": sum(1 for c in compactions if c.committed),
        "compaction_s": _rounded(sum(c.seconds for c in compactions), 3),
    }
    if layout == "mor":
        read_s, base = _median_time(lambda: read_optimized(None, tables))
        status = compaction_status(tables)
        figures["read_optimized_query_s"] = _rounded(read_s, 4)
        figures["read_optimized_rows"] = base.num_rows
        figures["read_optimized_stale_commits"] = status.pending_commits
    return figures


def time_travel_check(
    tables: OrdersTables, recorder: OrdersRecorder, expected: list[dict[str, Any]]
) -> dict[str, Any]:
    """Read ``orders`` (cow) as of the commit of the run's middle micro-batch, and its change feed since.

    The old version must equal the fold of every change the query had seen by that batch; that version
    with the change feed applied must equal the final truth. The middle is taken among the batches that
    carried changes, so the old version is a state the load produced: with two or more, a batch with changes
    on either side of it. With one (a small run lands in one bronze commit), the middle is the commit just
    before it (the empty table before the load), and ``batches_with_changes`` says so.
    """
    orders = tables.orders
    history = orders.commits()
    commits = [c for c in history if c.batch_id is not None]
    if not commits:
        return {"ok": False, "note": "no micro-batch commits in orders"}
    loaded = [c for c in commits if recorder.changes_by_batch.get(c.batch_id or 0)]
    if len(loaded) >= 2:
        middle = loaded[(len(loaded) - 1) // 2]
    else:
        before = [c for c in commits if not loaded or c.version < loaded[0].version]
        middle = before[-1] if before else commits[(len(commits) - 1) // 2]
    latest = history[-1].version
    if middle.version >= latest:
        # The change feed starts after the middle commit: there must be a version after it to read.
        return {
            "enough_versions": False,
            "ok": False,
            "note": (
                f"{orders.uri} has {len(commits)} micro-batch commit(s) and ends at version {latest}, the middle "
                "batch's own commit: time travel needs a later version to read the change feed from. Send the "
                "load over more micro-batches (more events, or a lower --rate)."
            ),
        }
    batch_id = middle.batch_id if middle.batch_id is not None else -1
    then = as_truth_rows(orders.read(version=middle.version))
    feed = orders.read_changes(starting_version=middle.version + 1)
    time_travel_ok = then == fold(recorder.changes_through(batch_id))
    feed_ok = apply_change_feed(then, feed) == expected
    return {
        "version": middle.version,
        "batch_id": batch_id,
        "batches_with_changes": len(loaded),
        "rows_then": len(then),
        "matches_truth_then": time_travel_ok,
        "change_feed_rows": feed.num_rows,
        "change_feed_matches_truth": feed_ok,
        "ok": time_travel_ok and feed_ok,
    }


def files_over_time(tables: OrdersTables, layout: Layout) -> list[tuple[float, int]]:
    """(commit time, data files of the layout's tables) after each commit, from the tables' logs."""
    events = [
        (c.timestamp.timestamp(), (c.files_added or 0) - (c.files_removed or 0))
        for table in tables.layout_tables(layout).values()
        if table.exists()
        for c in table.commits()
    ]
    points, files = [], 0
    for at, delta in sorted(events):
        files += delta
        points.append((at, files))
    return points


# -- the plot -------------------------------------------------------------------------------------------------------

# Each layout keeps its own colour, marker and line style, so where mor's points sit on cow's both still show.
_STYLE = {
    "cow": {"color": "#1f77b4", "marker": "o", "linestyle": "-", "markersize": 7},
    "mor": {"color": "#d62728", "marker": "s", "linestyle": "--", "markersize": 5, "markerfacecolor": "none"},
}


def plot_svg(
    latency: Mapping[str, list[tuple[float, float]]],
    files: Mapping[str, list[tuple[float, int]]],
    start: float,
) -> str:
    """Two panels side by side: each layout's median latency per micro-batch (one marker per batch: batches
    are separate moments, not a continuous line), and its data files over the run (a step at each commit)."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="40"><text x="8" y="24">'
            "orders plot not drawn: matplotlib is missing (pip install 'lakestack[report]')</text></svg>\n"
        )
    figure = Figure(figsize=(10.0, 3.6), dpi=96, layout="constrained")
    lat_axes, file_axes = figure.subplots(1, 2)
    for axes, title, unit in (
        (lat_axes, "latency to a snapshot read (median per batch)", "seconds"),
        (file_axes, "data files in the table", "files"),
    ):
        axes.set_title(title, fontsize="medium")
        axes.set_xlabel("seconds into the run")
        axes.set_ylabel(unit)
        axes.grid(True, alpha=0.3)
    for layout, values in latency.items():
        points = sorted(values)
        style = {**_STYLE.get(layout, {"marker": "o"}), "linestyle": "none"}
        lat_axes.plot([x - start for x, _ in points], [y for _, y in points], label=layout, **style)
    for layout, counts in files.items():
        points = sorted(counts)
        style = dict(_STYLE.get(layout, {"marker": "o"}))
        file_axes.plot(
            [x - start for x, _ in points],
            [y for _, y in points],
            drawstyle="steps-post",
            label=layout,
            **style,
        )
    for axes, series in ((lat_axes, latency), (file_axes, files)):
        points = [p for values in series.values() for p in values]
        if points:
            # Room past the last point on both axes, so no marker is cut by the frame.
            axes.set_xlim(0, max(max(x for x, _ in points) - start, 1.0) * 1.05)
            axes.set_ylim(0, max(max(float(y) for _, y in points), 1.0) * 1.12)
            axes.legend(loc="upper left")
        else:
            axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
    file_axes.yaxis.get_major_locator().set_params(integer=True)
    out = io.StringIO()
    # Text stays text (searchable, small); no creation date, so a re-render of the same run is identical.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "lakestack"}):
        figure.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def compare(
    tables: OrdersTables,
    recorder: OrdersRecorder,
    truths: Sequence[Mapping[str, Any]],
    *,
    compactions: Sequence[Any] = (),
    acknowledged: int | None = None,
) -> tuple[dict[str, Any], str]:
    """The ``pipelines.orders`` figures (``cow``, ``mor``, ``time_travel``, ``ok``) and the SVG plot.

    Args:
        tables: the run's orders tables (both layouts under one lake).
        recorder: the query's ``on_batch`` recorder.
        truths: the orders scenario's ground-truth files.
        compactions: mor compactions the job ran.
        acknowledged: orders events the stream acknowledged; the truth is comparable only when it equals
            the events the generators made (None: not checked).
    """
    expected = expected_state(truths)
    generated = sum(int(t.get("events", 0)) for t in truths)
    figures: dict[str, Any] = {}
    layouts = [layout for layout in LAYOUTS if layout in recorder.series]
    for layout in layouts:
        figures[layout] = layout_figures(
            tables,
            layout,
            recorder.series[layout],
            expected,
            change_bytes=recorder.change_bytes,
            compactions=compactions if layout == "mor" else (),
        )
    if "cow" in layouts:
        figures["time_travel"] = time_travel_check(tables, recorder, expected)
    figures.update(
        {
            "expected_rows": len(expected),
            "events_generated": generated,
            "bronze_rows": recorder.bronze_rows,
            "changes_applied": recorder.applied,
            "duplicates_removed": recorder.duplicates,
            "quarantined": recorder.quarantined,
            "other_types": recorder.other_types,
            "invariant_holds": recorder.bronze_rows
            == recorder.applied + recorder.quarantined + recorder.duplicates + recorder.other_types,
        }
    )
    comparable = acknowledged is None or acknowledged == generated
    if not comparable:
        figures["note"] = (
            f"the stream acknowledged {acknowledged} of the {generated} orders events generated: the expected "
            "state counts events that never arrived"
        )
    figures["ok"] = bool(
        comparable
        and layouts
        and all(figures[layout]["matches_expected"] for layout in layouts)
        and figures.get("time_travel", {"ok": True})["ok"]
        and figures["invariant_holds"]
    )
    latency: dict[str, list[tuple[float, float]]] = {
        layout: recorder.series[layout].points for layout in layouts
    }
    files: dict[str, list[tuple[float, int]]] = {
        layout: files_over_time(tables, layout) for layout in layouts
    }
    return {"ok": figures.pop("ok"), **figures}, plot_svg(latency, files, recorder.started)


def trade_off_rows(figures: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(measure, cow, mor, cow/mor) rows of the side-by-side table."""

    def show(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, bool):
            return "yes" if value else "NO"
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return f"{value:,}"

    def ratio(a: Any, b: Any) -> str:
        if isinstance(a, bool) or not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
            return ""
        return f"{a / b:.2f}"

    measures = [
        ("matches expected", "matches_expected"),
        ("rows", "rows"),
        ("write rows/s", "write_rows_per_s"),
        ("latency p50 (s)", "latency_p50_s"),
        ("latency p95 (s)", "latency_p95_s"),
        ("bytes written", "bytes_written"),
        ("write amplification", "write_amplification"),
        ("data files", "files"),
        ("snapshot query (s)", "snapshot_query_s"),
        ("read-optimized query (s)", "read_optimized_query_s"),
        ("compactions", "compactions"),
        ("compaction time (s)", "compaction_s"),
    ]
    cow, mor = figures.get("cow", {}), figures.get("mor", {})
    return [
        (label, show(cow.get(key)), show(mor.get(key)), ratio(cow.get(key), mor.get(key)))
        for label, key in measures
    ]


def trade_off_markdown(figures: Mapping[str, Any]) -> str:
    """The side-by-side table as Markdown."""
    lines = ["| measure | cow | mor | cow/mor |", "|---|---:|---:|---:|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in trade_off_rows(figures)]
    return "\n".join(lines)


def trade_off_text(figures: Mapping[str, Any]) -> str:
    """The side-by-side table for a terminal."""
    rows = [("measure", "cow", "mor", "cow/mor"), *trade_off_rows(figures)]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  "
        + "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(r))
        for r in rows
    )
