"""The run report as one HTML page that leads with the answer: the verdict, the run's settings and four
headline figures, then the latency and backlog plots, one summary row per pipeline (details folded away),
where the ingest job's time goes, the other plots and the Locust reports.

:func:`render_page` is pure over the report document (``report.json``'s content): the tests build one from a
fixture dict. Images next to the report (PNG, SVG) are embedded, so the page stands alone.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lakestack.stage_plot import LABELS as STAGE_LABELS

# Plain labels for the figures the pipelines report; any other key is shown with its underscores as spaces.
LABELS: dict[str, str] = {
    "rows": "rows in the table",
    "unacknowledged": "landed but never acknowledged",
    "unexpected": "rows nobody sent",
    "quarantined": "quarantined (malformed records)",
    "expected_quarantined": "quarantined, expected",
    "quarantine_matches_truth": "quarantine matches the generator's truth",
    "duplicates_removed": "duplicates removed",
    "expected_duplicates_removed": "duplicates removed, expected",
    "other_types": "other event types (not this pipeline's)",
    "expected_other_types": "other event types, expected",
    "late": "late events",
    "bronze_rows": "bronze rows read",
    "invariant_holds": "every bronze row accounted for",
    "gold_matches_truth": "per-minute revenue matches the truth",
    "injected": "frauds injected by the generator",
    "alerts": "alerts raised by the rule",
    "true_positives": "alerts that are injected frauds",
    "false_positives": "alerts that are not",
    "false_negatives": "injected frauds missed",
    "false_negatives_late": "missed, too late to judge",
    "duplicate_alerts": "duplicate alerts",
    "precision": "rule precision",
    "recall": "rule recall",
    "transactions": "transactions in silver",
    "table_version": "table version",
    "throughput_eps": "throughput (landed)",
    "expected_rows": "rows expected",
    "events_generated": "events generated",
    "changes_applied": "changes applied",
    "matches_expected": "matches the expected state",
    "changes": "changes",
    "write_rows_per_s": "write throughput",
    "write_amplification": "write amplification (bytes written / change bytes)",
    "snapshot_query_s": "snapshot query",
    "read_optimized_query_s": "read-optimized query",
    "read_optimized_rows": "read-optimized rows",
    "read_optimized_stale_commits": "commits the read-optimized view lags",
    "compaction_s": "compaction time",
    "model_version": "model version",
    "scored": "transactions scored",
    "roc_auc": "ROC AUC",
    "precision_at_threshold": "model precision at its threshold",
    "recall_at_threshold": "model recall at its threshold",
    "query_seconds": "query time",
    "files_read": "files read by the query",
    "rows_found": "rows found",
    "json_vs_delta": "JSON vs Delta (the same sales rows, three readers)",
    "time_travel": "time travel and change feed",
    "layout": "transactions table before and after compaction + Z-order",
    "model": "fraud model",
    "revenue_by_product_s": "query: revenue by product",
    "one_sales_id_s": "query: one sales id",
    "last_hour_revenue_s": "query: last hour's revenue",
    "answers_match": "the three readers' answers match",
}
# Units of the rate figures, by key suffix.
_RATES = (("_rows_per_s", "rows/s"), ("_eps", "events/s"), ("_per_s", "/s"))

_STAGE_HELP: dict[str, str] = {
    "wait_in_stream": "arrival in the stream to the start of the plan that read it (trigger wait included)",
    "planning_and_reading": "the source's latestOffset: listing shards, planning ranges (executors read later)",
    "transfer_into_spark": "rows from the source out to the driver as Arrow (0 when the executors write)",
    "spark_processing": "Spark's own planning and scheduling of the batch",
    "delta_commit": "writing the batch's Parquet files and the Delta commit",
    "checkpoint": "Spark's offset and commit logs (after the rows are visible)",
}

FRAUD_CAPTION = (
    "Two different measures. Rule precision: of the alerts the stateful rule raised (a transaction under 1.00 "
    "followed by one over 500.00 on the same account within a minute), the share that name a fraud the "
    "generator injected. Model precision at its threshold: the logistic-regression model scores every "
    "transaction (from its amount and the account's transactions in the minute before it); of those scoring "
    "at or above the threshold, the share that are injected frauds. The model approximates the pattern "
    "instead of checking it exactly, so transactions that are not frauds also cross its threshold."
)


def fraud_caption(figures: Mapping[str, Any]) -> str:
    """:data:`FRAUD_CAPTION`, with how many transactions the model flagged when the figures tell."""
    model = figures.get("model") or {}
    precision, recall = model.get("precision_at_threshold"), model.get("recall_at_threshold")
    injected = figures.get("injected")
    if not (precision and recall is not None and injected):
        return FRAUD_CAPTION
    caught = round(recall * injected)
    flagged = round(caught / precision)
    return (
        f"{FRAUD_CAPTION} Here the rule raised {figures.get('alerts', 0):,} alerts over "
        f"{figures.get('transactions', 0):,} transactions; the model flagged about {flagged:,} of "
        f"{model.get('scored', 0):,} at threshold {model.get('threshold', 0):.2f}, {caught:,} of them injected."
    )


LATENCY_NOTE = (
    "End-to-end latency runs from each event's event_time (set by the generator before it is sent) to the "
    "timestamp of the Delta commit that made it visible. Besides the stages of the batch that carried it, it "
    "includes the generator's own batching before PutRecords, and the wait in the stream until a trigger "
    "plans a batch that reads the event: an event that arrives while a batch is running waits for that "
    "whole batch to commit first. The stage figures describe one batch from its plan to its commit, so their "
    "sum is shorter than the end-to-end latency by roughly that wait (up to one batch's duration)."
)
WAIT_GAP_NOTE = (
    "Wait in the stream is not measured in this run (no batch has it, so the plot leaves it out): it comes "
    "from the Kinesis source's per-batch metrics (when the plan started, the mean arrival time of the records "
    "it read), kept under Spark's batch id, and no batch that carried rows has them here (the Event Hubs "
    "path's Kafka source keeps none). The difference between the end-to-end latency and the stages' sum is "
    "mostly this wait."
)

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:64rem;margin:1.5rem auto;padding:0 1rem;color:#222;"
    "line-height:1.4}h1{font-size:1.5rem;margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}"
    ".verdict{padding:.7rem 1rem;border-radius:.4rem;font-weight:600;font-size:1.1rem}"
    ".pass{background:#e6f4ea;color:#1e6b34;border:1px solid #9ccfab}"
    ".fail{background:#fce8e6;color:#a50e0e;border:1px solid #f0a8a0}"
    ".cards{display:grid;grid-template-columns:repeat(4,1fr);gap:.8rem;margin:1rem 0}"
    ".card{border:1px solid #ddd;border-radius:.4rem;padding:.6rem .8rem}"
    ".card .label{color:#555;font-size:.85rem}.card .value{font-size:1.5rem;font-weight:600}"
    ".card .sub{color:#555;font-size:.8rem}"
    "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .6rem;"
    "text-align:left;vertical-align:top}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "tbody th{font-weight:500;background:#fafafa}"
    "details{margin:.6rem 0;border:1px solid #ddd;border-radius:.4rem;padding:.3rem .8rem}"
    "summary{cursor:pointer;font-weight:600}figure{margin:1rem 0}img{max-width:100%}"
    "figcaption,.caption{color:#555;font-size:.9rem}code{background:#f4f4f4;padding:0 .2rem}"
    ".ok{color:#1e6b34}.bad{color:#a50e0e;font-weight:600}"
    "@media (max-width:700px){.cards{grid-template-columns:repeat(2,1fr)}}"
)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def label(key: str) -> str:
    """A figure's plain label: from :data:`LABELS`, else its words (``latency_p50_s`` -> ``latency p50``)."""
    if key in LABELS:
        return LABELS[key]
    for suffix, _ in _RATES:
        if key.endswith(suffix):
            return key.removesuffix(suffix).replace("_", " ")
    return key.removesuffix("_s").replace("_", " ")


def seconds(value: float) -> str:
    """Seconds for a reader: ``124 s``, ``24.3 s``, ``1.36 s``, ``8 ms``, ``0.7 ms``."""
    size = abs(value)
    if size >= 1 or value == 0:
        digits = 0 if size >= 100 else 1 if size >= 10 else 2
        return f"{value:,.{0 if value == 0 else digits}f} s"
    return f"{value * 1000:.{0 if size >= 0.01 else 1}f} ms"


def _bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:,.0f} bytes"


def _number(key: str, value: float) -> str:
    unit = next((unit for suffix, unit in _RATES if key.endswith(suffix)), None)
    if unit is not None:
        text = f"{value:,.0f} {unit}"
    elif key.endswith(("_s", "_seconds")):
        text = seconds(float(value))
    elif "bytes" in key:
        text = _bytes(float(value))
    elif key.endswith("_usd"):
        text = f"{value:,.2f} USD"
    else:
        text = f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"
    return text


def shown(key: str, value: Any) -> str:
    """A figure's value with its unit and thousands separators (``10,810 rows/s``, ``24.3 s``, ``yes``)."""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int | float):
        return _number(key, value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) if value else "none"
    return "n/a" if value is None else str(value)


def _table(rows: Sequence[tuple[str, str]], *, css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table{cls}><tbody>{body}</tbody></table>"


def _columns(groups: Mapping[str, Mapping[str, Any]]) -> str:
    """Side by side: one column per group (e.g. cow and mor), one row per figure any of them has."""
    keys = list(dict.fromkeys(k for g in groups.values() for k, v in g.items() if not isinstance(v, dict)))
    head = "<tr><th></th>" + "".join(f'<th class="num">{_e(label(name))}</th>' for name in groups) + "</tr>"
    rows = "".join(
        f"<tr><th>{_e(label(k))}</th>"
        + "".join(f'<td class="num">{_e(shown(k, g.get(k)) if k in g else "")}</td>' for g in groups.values())
        + "</tr>"
        for k in keys
    )
    return f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def side_by_side(nested: dict[str, dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """Nested figures grouped for display: ones sharing most of their keys (e.g. the same measures of two
    layouts) go in one table, a column each; the others stand alone."""
    groups: list[dict[str, dict[str, Any]]] = []
    for key, value in nested.items():
        for group in groups:
            first = next(iter(group.values()))
            if all(not isinstance(v, dict) for v in value.values()) and all(
                not isinstance(v, dict) for v in first.values()
            ):
                shared = len(set(first) & set(value))
                if shared * 2 >= max(len(first), len(value)):
                    group[key] = value
                    break
        else:
            groups.append({key: value})
    return groups


def _figures(figures: Mapping[str, Any]) -> str:
    """A pipeline's figures: plain ones in one table, nested ones (a dict each) as their own tables."""
    flat = [
        (label(k), shown(k, v))
        for k, v in figures.items()
        if k not in ("ok", "plot") and not isinstance(v, dict)
    ]
    parts = [_table(flat)] if flat else []
    nested = {k: v for k, v in figures.items() if isinstance(v, dict) and v}
    for group in side_by_side(nested):
        if len(group) > 1:
            # The same measures of several things (e.g. cow and mor): one table, a column each.
            parts += [f"<h4>{_e(' vs '.join(label(k) for k in group))}</h4>", _columns(group)]
            continue
        [(key, value)] = group.items()
        inner = {k: v for k, v in value.items() if isinstance(v, dict)}
        plain = {k: v for k, v in value.items() if not isinstance(v, dict)}
        parts.append(f"<h4>{_e(label(key))}</h4>")
        if inner:
            parts.append(_columns(inner))
        if plain:
            parts.append(_table([(label(k), shown(k, v)) for k, v in plain.items()]))
    return "\n".join(parts)


def _image(src: str, alt: str, base: Path | None, caption: str = "") -> str:
    path = None if base is None else base / src
    if path is not None and path.is_file():
        kind = {".png": "image/png", ".svg": "image/svg+xml"}.get(path.suffix)
        if kind:
            src = f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img src="{_e(src)}" alt="{_e(alt)}"><figcaption>{_e(caption or alt)}</figcaption></figure>'
    )


def _settings(data: Mapping[str, Any]) -> str:
    settings: Mapping[str, Any] = data.get("run_settings") or {}
    rows = [(k, str(v)) for k, v in settings.items() if v not in (None, "")]
    rows += [("started", str(data.get("started_at", "n/a")))]
    if data.get("duration_s") is not None:
        rows.append(("run time, start to report", seconds(float(data["duration_s"]))))
    return "<h2>Run settings</h2>" + _table(rows, css="settings")


def _cost(data: Mapping[str, Any]) -> tuple[str, str]:
    timeline = data.get("timeline") or {}
    costs = [float(c) for c in timeline.get("cost_usd") or []]
    spent = max([float(timeline.get("cost_at_start_usd") or 0.0), *costs])
    if spent <= 0:
        return "local: no cost", "emulators on this machine"
    return f"{spent:,.2f} USD" if spent >= 1 else f"{spent:.4f} USD", "estimated at list prices"


def _card(title: str, value: str, sub: str) -> str:
    return (
        f'<div class="card"><div class="label">{_e(title)}</div><div class="value">{_e(value)}</div>'
        f'<div class="sub">{_e(sub)}</div></div>'
    )


def _headline(data: Mapping[str, Any]) -> str:
    p50, p95, p99 = (data.get(f"latency_p{q}_s") for q in (50, 95, 99))
    throughput, sent_rate = data.get("throughput_eps"), data.get("send_rate_eps")
    cost, cost_sub = _cost(data)
    return (
        '<div class="cards">'
        + _card(
            "end-to-end latency p95",
            "n/a" if p95 is None else seconds(p95),
            f"p50 {'n/a' if p50 is None else seconds(p50)}, p99 {'n/a' if p99 is None else seconds(p99)}",
        )
        + _card(
            "throughput (landed)",
            "n/a" if throughput is None else f"{throughput:,.0f} rows/s",
            "" if sent_rate is None else f"sent at {sent_rate:,.0f} events/s",
        )
        + _card(
            "missing / duplicates",
            f"{data.get('missing', 0):,} / {data.get('duplicates', 0):,}",
            f"of {data.get('events_sent', 0):,} events acknowledged",
        )
        + _card("cost", cost, cost_sub)
        + "</div>"
    )


def _plot(plots: Sequence[tuple[str, str, str]], name: str, base: Path | None) -> str:
    return "".join(_image(path, title, base) for n, title, path in plots if n == name)


def _summary_row(name: str, figures: Mapping[str, Any], failed: Sequence[str]) -> str:
    rows = next((figures[k] for k in ("rows", "transactions", "expected_rows") if k in figures), None)
    layouts = [figures[k] for k in ("cow", "mor") if isinstance(figures.get(k), dict)]
    p50 = figures.get("latency_p50_s", figures.get("detection_latency_p50_s"))
    p95 = figures.get("latency_p95_s", figures.get("detection_latency_p95_s"))
    if p50 is None and layouts:
        p50, p95 = layouts[0].get("latency_p50_s"), layouts[0].get("latency_p95_s")
    latency = "n/a" if p50 is None else f"{seconds(p50)} / {'n/a' if p95 is None else seconds(p95)}"
    ok = bool(figures.get("ok"))
    status = '<span class="ok">ok</span>' if ok else '<span class="bad">FAILED</span>'
    checks = "every check holds" if ok else ("failed: " + ", ".join(failed) if failed else "see its details")
    return (
        f'<tr><td>{_e(name)}</td><td>{status}</td><td class="num">{_e(shown("rows", rows))}</td>'
        f'<td class="num">{_e(latency)}</td><td>{_e(checks)}</td></tr>'
    )


def _pipelines(data: Mapping[str, Any], base: Path | None, failed: Mapping[str, Sequence[str]]) -> str:
    pipelines: Mapping[str, Mapping[str, Any]] = data.get("pipelines") or {}
    if not pipelines:
        return ""
    head = (
        '<tr><th>pipeline</th><th>status</th><th class="num">rows</th>'
        '<th class="num">latency p50 / p95</th><th>checks</th></tr>'
    )
    rows = "".join(_summary_row(n, f, failed.get(n, ())) for n, f in pipelines.items())
    parts = ["<h2>Pipelines</h2>", f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"]
    for name, figures in pipelines.items():
        parts.append(f"<details><summary>{_e(name)}: every figure</summary>")
        if name == "fraud" and "precision" in figures and isinstance(figures.get("model"), dict):
            parts.append(f'<p class="caption">{_e(fraud_caption(figures))}</p>')
        parts.append(_figures(figures))
        for key, value in figures.items():
            if isinstance(value, str) and value.endswith((".svg", ".png")):
                parts.append(_image(value, f"{name} {key}", base))
        parts.append("</details>")
    return "\n".join(parts)


def _stages(data: Mapping[str, Any], base: Path | None) -> str:
    stages: Mapping[str, Any] = data.get("stages") or {}
    summary: Mapping[str, Mapping[str, Any]] = stages.get("summary") or {}
    if not summary:
        return ""
    batches = max(int(s.get("batches", 0)) for s in summary.values())
    head = (
        '<tr><th>stage</th><th class="num">p50</th><th class="num">p95</th><th class="num">mean</th>'
        "<th>what it covers</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{_e(STAGE_LABELS.get(n, n))}</td>"
        + "".join(f'<td class="num">{_e(seconds(float(f[q])))}</td>' for q in ("p50_s", "p95_s", "mean_s"))
        + f"<td>{_e(_STAGE_HELP.get(n, ''))}</td></tr>"
        for n, f in summary.items()
    )
    p50_sum = sum(float(f["p50_s"]) for n, f in summary.items() if n != "checkpoint")
    parts = [
        "<h2>Where the time goes (ingest)</h2>",
        f"<p>Per micro-batch, over the {batches:,} batches that carried rows.</p>",
        f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>",
    ]
    if stages.get("plot") and base is not None and (base / str(stages["plot"])).is_file():
        parts.append(_image(str(stages["plot"]), "stage time per micro-batch", base))
    p50 = data.get("latency_p50_s")
    if p50 is not None:
        parts.append(
            f"<p><strong>Why the end-to-end p50 ({_e(seconds(p50))}) exceeds the stages' p50s added up "
            f"({_e(seconds(p50_sum))}, checkpoint left out: it comes after the rows are visible).</strong> "
            f"{_e(LATENCY_NOTE)}</p>"
        )
    if "wait_in_stream" not in summary:
        parts.append(f'<p class="caption">{_e(WAIT_GAP_NOTE)}</p>')
    return "\n".join(parts)


def _locust(base: Path | None) -> str:
    if base is None:
        return ""
    reports = sorted(base.glob("locust-*.html"))
    if not reports:
        return ""
    items = "".join(
        f'<li><a href="{_e(p.name)}">{_e(p.stem.removeprefix("locust-"))}</a> ({_e(p.name)})</li>'
        for p in reports
    )
    return "<h2>Load generator (Locust) reports</h2><ul>" + items + "</ul>"


def render_page(
    data: Mapping[str, Any],
    *,
    verdict: str,
    plots: Sequence[tuple[str, str, str]] = (),
    base: Path | None = None,
    failed: Mapping[str, Sequence[str]] | None = None,
    faults: Sequence[tuple[str, str]] = (),
    title: str = "lakestack run report",
) -> str:
    """The report page.

    Args:
        data: the report document (``report.json``: the run's figures, ``pipelines``, ``stages``,
            ``timeline``, ``run_settings``).
        verdict: the one-line PASS/FAIL verdict.
        plots: (name, title, path relative to ``base``) of each rendered plot, in report order.
        base: the report's folder: images there are embedded, Locust reports there linked.
        failed: per failed pipeline, the checks that failed.
        faults: (label, value) rows of the faults injected and what the clients counted.
        title: the page title.
    """
    ok = verdict.startswith("PASS")
    others = [name for name, _, _ in plots if name not in ("latency", "backlog")]
    notes = data.get("notes") or []
    parts = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="verdict {"pass" if ok else "fail"}">{_e(verdict)}</p>',
        _headline(data),
        _settings(data),
    ]
    if plots:
        parts += [
            "<h2>Latency and backlog</h2>",
            _plot(plots, "latency", base),
            _plot(plots, "backlog", base),
        ]
    elif data.get("timeline"):
        parts.append(
            "<p>Plots not drawn: matplotlib is missing (<code>pip install 'lakestack[report]'</code>).</p>"
        )
    parts += [_pipelines(data, base, failed or {}), _stages(data, base)]
    if others:
        parts += ["<h2>More plots</h2>", *(_plot(plots, name, base) for name in others)]
    parts.append(_locust(base))
    if notes:
        parts += ["<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"]
    if faults:
        parts += ["<h2>Faults injected</h2>", _table(faults)]
    body = "\n".join(p for p in parts if p)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


__all__ = [
    "FRAUD_CAPTION",
    "LABELS",
    "LATENCY_NOTE",
    "WAIT_GAP_NOTE",
    "label",
    "render_page",
    "seconds",
    "shown",
]
