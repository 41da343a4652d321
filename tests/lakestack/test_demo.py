"""`lakestack demo` end to end, as a newcomer runs it (small: a few hundred events)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _demo_json(reports_dir: Path, *arguments: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``lakestack demo ... --json`` as a newcomer would; its exit must be 0; return it and its report."""
    result = subprocess.run(
        [sys.executable, "-m", "lakestack", "demo", *arguments, "--reports-dir", str(reports_dir), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def aws_demo(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """One demo on the AWS path with both downstream pipelines (one Spark start-up for the tests below):
    300 events of each scenario, sales and orders, into the one bronze table."""
    reports = tmp_path_factory.mktemp("demo")
    result, report = _demo_json(
        reports, "--pipelines", "ingest,sales,orders", "--events", "300", "--rate", "300", "--users", "2"
    )
    (run_dir,) = reports.iterdir()
    return result, report, run_dir


@pytest.mark.slow
def test_demo_json_reports_every_event_landed_once_and_the_sales_pipeline_ok(aws_demo):
    result, report, run_dir = aws_demo
    assert {key: report[key] for key in ("events_sent", "events_landed", "missing", "duplicates", "ok")} == {
        "events_sent": 600,
        "events_landed": 600,
        "missing": 0,
        "duplicates": 0,
        "ok": True,
    }
    assert report["table_uri"] == "s3://lakestack-local-lake/bronze/events"
    assert report["files"] >= 1
    assert 0 < report["latency_p50_s"] <= report["latency_p95_s"] <= report["latency_p99_s"]
    assert report["throughput_eps"] > 0
    assert report["send_rate_eps"] > 0
    document = json.loads((run_dir / "report.json").read_text())
    assert document["events_landed"] == 600
    # The same plots as the bench's report, from the same report module.
    assert document["plots"] == [
        # No cost plot: a run on the emulators costs nothing.
        f"plots/{n}.png"
        for n in ("latency", "backlog", "sent_landed", "batches")
    ]
    assert sum(document["timeline"]["sent"]) == 600
    # The four timeline plots and the ingest job's stage plot, all embedded.
    page = (run_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 5
    # The page leads with the answer and the run's settings.
    assert (
        '<p class="verdict pass">PASS: every acknowledged event landed exactly once; pipelines ok: sales, orders'
        "</p>" in page
    )
    assert '<div class="value">local: no cost</div>' in page
    assert document["run_settings"]["pipelines"] == "ingest, sales, orders"
    assert (run_dir / document["stages"]["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "PASS: every acknowledged event landed exactly once" in (run_dir / "report.md").read_text()
    assert "PASS: every acknowledged event landed exactly once; pipelines ok: sales, orders" in result.stdout
    # The terminal carries the demo's own lines only: Spark's and the JDK's output went to the run's spark.log.
    terminal = result.stdout + result.stderr
    noise = ("WARNING: Using incubator modules", " WARN ", "\tat ", "Exception in thread", "Traceback")
    assert [n for n in noise if n in terminal] == [], result.stderr[-3000:]
    assert "WARNING: Using incubator modules" in (run_dir / "spark.log").read_text()
    assert sorted(report["pipelines"]) == ["ingest", "orders", "sales"]
    sales = report["pipelines"]["sales"]
    assert sales["ok"] is True, sales
    # Bronze holds both scenarios: the orders events are the sales job's other types.
    assert (sales["bronze_rows"], sales["other_types"]) == (600, sales["expected_other_types"])
    assert sales["rows"] + sales["quarantined"] + sales["duplicates_removed"] + sales["other_types"] == 600
    assert (sales["quarantined"], sales["duplicates_removed"]) == (
        sales["expected_quarantined"],
        sales["expected_duplicates_removed"],
    )
    assert sales["json_vs_delta"]["answers_match"] is True
    assert sales["json_vs_delta"]["json"]["bytes"] > sales["json_vs_delta"]["delta"]["bytes"] > 0


@pytest.mark.slow
def test_demo_runs_the_orders_pipeline_and_both_layouts_match_the_truth(aws_demo):
    result, report, run_dir = aws_demo
    orders = report["pipelines"]["orders"]
    assert orders["ok"] is True, orders
    assert (orders["cow"]["matches_expected"], orders["mor"]["matches_expected"]) == (True, True)
    assert orders["cow"]["rows"] == orders["mor"]["rows"] == orders["expected_rows"] > 0
    assert orders["time_travel"]["ok"] is True
    assert (orders["events_generated"], orders["bronze_rows"]) == (300, 600)
    assert (orders["quarantined"], orders["other_types"]) == (
        orders["expected_quarantined"],
        orders["expected_other_types"],
    )
    assert (
        orders["changes_applied"]
        + orders["quarantined"]
        + orders["duplicates_removed"]
        + orders["other_types"]
        == 600
    )
    assert orders["invariant_holds"] is True
    svg = (run_dir / orders["plot"]).read_text()
    # matplotlib's SVG: an XML declaration, the doctype, then the drawing.
    assert svg.startswith("<?xml ") and "<svg " in svg[:400] and svg.rstrip().endswith("</svg>")
    assert "pipelines ok: sales, orders" in result.stdout


@pytest.mark.slow
def test_demo_on_the_azure_path_reconciles_every_event(tmp_path):
    """Locust (Event Hubs user) -> Kafka-protocol broker -> Spark (Kafka source) -> Delta on Azurite."""
    result, report = _demo_json(
        tmp_path, "--cloud", "azure", "--pipelines", "ingest,sales,fraud", "--events", "300", "--rate", "300",
        "--users", "2",
    )  # fmt: skip
    # ingest, sales and fraud: 300 events of each scenario they need (sales, transactions).
    assert {key: report[key] for key in ("events_sent", "events_landed", "missing", "duplicates", "ok")} == {
        "events_sent": 600,
        "events_landed": 600,
        "missing": 0,
        "duplicates": 0,
        "ok": True,
    }
    assert {name: figures["ok"] for name, figures in report["pipelines"].items()} == {
        "ingest": True,
        "sales": True,
        "fraud": True,
    }
    assert report["table_uri"] == "abfss://lake@devstoreaccount1.dfs.core.windows.net/bronze/events"
    (run_dir,) = tmp_path.iterdir()
    ledger = [
        json.loads(line) for path in (run_dir / "ledger").glob("ledger-*.jsonl") for line in path.open()
    ]
    assert {entry["shard_id"] for entry in ledger} <= {f"partition-{n}" for n in range(4)}
    assert "Azurite at http://127.0.0.1:" in result.stderr
