"""The report page (report.html): the answer first, plain labels with units, a row and details per pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakestack.report_page import label, render_page, seconds, shown

# A demo run's report document, cut down from a real run (reports/20261127T013616Z).
DATA = {
    "events_sent": 30000,
    "events_landed": 30000,
    "missing": 0,
    "duplicates": 0,
    "unacknowledged": 0,
    "latency_p50_s": 13.438,
    "latency_p95_s": 21.017,
    "latency_p99_s": 21.565,
    "throughput_eps": 1049.9,
    "send_rate_eps": 2933.2,
    "duration_s": 117.0,
    "started_at": "2026-11-27T01:36:16+00:00",
    "notes": [],
    "run_settings": {
        "command": "lakestack demo --events 10000",
        "load": "10,000 events per scenario",
        "git commit": "49b316f0a1b2",
    },
    "pipelines": {
        "ingest": {"ok": True, "rows": 30000, "latency_p50_s": 13.438, "latency_p95_s": 21.017},
        "fraud": {
            "ok": True,
            "injected": 85,
            "alerts": 85,
            "precision": 1.0,
            "transactions": 10000,
            "detection_latency_p50_s": 37.014,
            "detection_latency_p95_s": 43.033,
            "model": {
                "scored": 10000,
                "threshold": 0.5,
                "precision_at_threshold": 0.4749,
                "recall_at_threshold": 1.0,
            },
        },
        "orders": {
            "ok": False,
            "expected_rows": 199,
            "cow": {
                "rows": 199,
                "write_rows_per_s": 10809.7,
                "latency_p50_s": 24.266,
                "bytes_written": 39405,
            },
            "mor": {
                "rows": 199,
                "write_rows_per_s": 24099.5,
                "latency_p50_s": 23.944,
                "bytes_written": 658383,
            },
            "plot": "orders.svg",
        },
    },
    "stages": {
        "summary": {
            "planning_and_reading": {"p50_s": 1.358, "p95_s": 1.397, "mean_s": 1.147, "batches": 3},
            "delta_commit": {"p50_s": 8.846, "p95_s": 10.558, "mean_s": 7.904, "batches": 3},
            "checkpoint": {"p50_s": 0.072, "p95_s": 0.203, "mean_s": 0.119, "batches": 3},
        },
        "batches": [],
        "plot": "stages.png",
    },
    "timeline": {"cost_usd": [0.0, 0.0], "cost_at_start_usd": 0.0},
}
VERDICT = "FAIL: pipeline orders failed: cow.matches_expected"


def _page(tmp_path: Path | None = None, data=DATA, **kwargs) -> str:
    return render_page(
        data, verdict=VERDICT, base=tmp_path, failed={"orders": ["cow.matches_expected"]}, **kwargs
    )


def _body(page: str) -> str:
    return page.split("<body>", 1)[1]


def test_the_page_leads_with_the_verdict_the_headline_figures_and_the_run_settings():
    body = _body(_page())

    verdict = body.index('<p class="verdict fail">FAIL: pipeline orders failed: cow.matches_expected</p>')
    cards = [
        '<div class="label">end-to-end latency p95</div><div class="value">21.0 s</div>'
        '<div class="sub">p50 13.4 s, p99 21.6 s</div>',
        '<div class="label">throughput (landed)</div><div class="value">1,050 rows/s</div>'
        '<div class="sub">sent at 2,933 events/s</div>',
        '<div class="label">missing / duplicates</div><div class="value">0 / 0</div>'
        '<div class="sub">of 30,000 events acknowledged</div>',
        '<div class="label">cost</div><div class="value">local: no cost</div>',
    ]
    positions = [body.index(card) for card in cards]
    settings = body.index("<tr><th>command</th><td>lakestack demo --events 10000</td></tr>")
    assert "<tr><th>git commit</th><td>49b316f0a1b2</td></tr>" in body
    assert "<tr><th>run time, start to report</th><td>117 s</td></tr>" in body
    pipelines = body.index("<h2>Pipelines</h2>")
    assert verdict < min(positions) and max(positions) < settings < pipelines


def test_a_local_run_shows_no_cost_figure_and_a_priced_one_shows_its_cost():
    priced = {**DATA, "timeline": {"cost_usd": [0.42, 1.68], "cost_at_start_usd": 0.2}}

    assert '<div class="value">local: no cost</div>' in _page()
    assert '<div class="value">1.68 USD</div><div class="sub">estimated at list prices</div>' in _page(
        data=priced
    )


def test_one_summary_row_per_pipeline_and_its_figures_folded_in_details():
    body = _body(_page())

    assert (
        '<tr><td>fraud</td><td><span class="ok">ok</span></td><td class="num">10,000</td>'
        '<td class="num">37.0 s / 43.0 s</td><td>every check holds</td></tr>'
    ) in body
    assert (
        '<tr><td>orders</td><td><span class="bad">FAILED</span></td><td class="num">199</td>'
        '<td class="num">24.3 s / n/a</td><td>failed: cow.matches_expected</td></tr>'
    ) in body
    assert body.count("<details>") == 3
    assert "<details><summary>orders: every figure</summary>" in body


def test_figures_have_plain_labels_units_and_thousands_separators():
    body = _body(_page())

    # cow and mor side by side, one column each.
    assert (
        '<h4>cow vs mor</h4>\n<table><thead><tr><th></th><th class="num">cow</th><th class="num">mor</th>'
        in body
    )
    assert (
        '<tr><th>write throughput</th><td class="num">10,810 rows/s</td><td class="num">24,100 rows/s</td></tr>'
    ) in body
    assert (
        '<tr><th>bytes written</th><td class="num">39.41 kB</td><td class="num">658.38 kB</td></tr>' in body
    )
    assert "write_rows_per_s" not in body and "10809.7" not in body
    assert "<tr><th>rule precision</th><td>1.000</td></tr>" in body
    assert "<tr><th>model precision at its threshold</th><td>0.475</td></tr>" in body


def test_the_fraud_details_say_what_each_precision_measures():
    body = _body(_page())

    fraud = body.split("<details><summary>fraud: every figure</summary>", 1)[1].split("</details>", 1)[0]
    assert fraud.strip().startswith(
        '<p class="caption">Two different measures. Rule precision: of the alerts'
    )
    assert "the model flagged about 179 of 10,000 at threshold 0.50, 85 of them injected." in fraud


def test_the_stage_section_explains_the_gap_to_the_end_to_end_latency_and_the_missing_wait():
    body = _body(_page())

    assert (
        "Why the end-to-end p50 (13.4 s) exceeds the stages' p50s added up (10.2 s, checkpoint left out"
    ) in body
    assert '<tr><td>Delta commit</td><td class="num">8.85 s</td><td class="num">10.6 s</td>' in body
    assert "Wait in the stream is not measured in this run" in body


def test_locust_reports_beside_the_report_are_linked_and_images_embedded(tmp_path: Path):
    (tmp_path / "locust-sales.html").write_text("<html></html>")
    (tmp_path / "locust-orders.html").write_text("<html></html>")
    (tmp_path / "orders.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')

    body = _body(_page(tmp_path))

    assert (
        '<li><a href="locust-orders.html">orders</a> (locust-orders.html)</li>'
        '<li><a href="locust-sales.html">sales</a> (locust-sales.html)</li>'
    ) in body
    assert '<img src="data:image/svg+xml;base64,' in body
    assert "Load generator (Locust) reports" not in _page(None)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("write_rows_per_s", 10809.7, "10,810 rows/s"),
        ("throughput_eps", 1049.9, "1,050 events/s"),
        ("snapshot_query_s", 0.0077, "7.7 ms"),
        ("compaction_s", 0.971, "971 ms"),
        ("latency_p50_s", 24.266, "24.3 s"),
        ("bytes", 3139336, "3.14 MB"),
        ("rows", 9745, "9,745"),
        ("precision", 1.0, "1.000"),
        ("invariant_holds", False, "NO"),
        ("false_positive_sample", [], "none"),
        ("read_optimized_query_s", None, "n/a"),
    ],
)
def test_a_value_is_shown_with_its_unit(key, value, expected):
    assert shown(key, value) == expected


def test_labels_and_seconds():
    assert [label(k) for k in ("write_rows_per_s", "latency_p95_s", "files", "json_vs_delta")] == [
        "write throughput",
        "latency p95",
        "files",
        "JSON vs Delta (the same sales rows, three readers)",
    ]
    assert [seconds(v) for v in (0, 124.4, 1.358, 0.157)] == ["0 s", "124 s", "1.36 s", "157 ms"]


def test_run_settings_name_the_command_the_load_and_the_pipelines(tmp_path: Path):
    from lakestack.run_facts import git_commit, run_settings

    timed = run_settings(
        events=None,
        rate=500,
        users=2,
        duration_s=120,
        pipelines=["ingest", "sales"],
        argv=["bench", "--stack", "local"],
    )
    counted = run_settings(
        events=10_000, rate=1_000, users=4, duration_s=None, pipelines=["ingest"], argv=["demo"]
    )

    assert list(timed) == ["command", "load", "rate", "pipelines", "git commit", "machine"]
    assert (timed["command"], timed["load"], timed["rate"], timed["pipelines"]) == (
        "lakestack bench --stack local",
        "for 120 s per scenario",
        "up to 500 events/s per scenario (2 Locust users each)",
        "ingest, sales",
    )
    assert (counted["command"], counted["load"]) == ("lakestack demo", "10,000 events per scenario")
    assert git_commit(tmp_path) == "unknown"
