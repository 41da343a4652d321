"""The demo frame without Spark: choosing plug-ins, what each pipeline must find, how the report reads."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pyarrow as pa
import pytest

from jobs.pipelines._job import JobSettings
from lakestack.demo_pipelines import PIPELINES, Loads, ScenarioLoad, scenarios_for, select
from lakestack.demo_pipelines._base import RunContext, invariant_holds, job_totals, quarantined_positions
from lakestack.errors import UserError
from lakestack.reconcile import reconcile
from lakestack.report import RunReport
from loadtest.ledger import LedgerEntry


def entry(event_id: str, seq: int, shard: str = "shardId-0") -> LedgerEntry:
    return LedgerEntry(event_id, "2026-01-02T03:04:05.000000Z", shard, str(seq))


def test_pipelines_are_chosen_in_registry_order_with_ingest_always_first():
    assert [p.name for p in select(None)] == list(PIPELINES)
    assert [p.name for p in select(["sales"])] == ["ingest", "sales"]
    assert [p.name for p in select(["ingest"])] == ["ingest"]
    assert scenarios_for(select(["ingest"])) == ["sales"]  # ingest needs some load
    assert scenarios_for(select(["sales", "ingest"])) == ["sales"]
    assert [p.name for p in select(["fraud"])] == ["ingest", "fraud"]
    assert scenarios_for(select(["fraud", "sales"])) == ["sales", "transactions"]
    assert [p.name for p in select(["orders"])] == ["ingest", "orders"]
    assert scenarios_for(select(["orders", "sales"])) == ["sales", "orders"]
    with pytest.raises(
        UserError,
        match=r"--pipelines: expected names among ingest, sales, fraud, orders, found clicks, views",
    ):
        select(["views", "sales", "clicks"])


def test_what_each_pipeline_must_quarantine_and_count_as_other_types(tmp_path):
    sales = ScenarioLoad(
        "sales",
        [entry("s1", 1), entry("s2", 2), entry("bad-json", 3), entry("bad-field", 4), entry("s1", 5)],
        [{"malformed": {"bad-json": "not_json"}}, {"malformed": {"bad-field": "wrong_type"}}],
    )
    orders = ScenarioLoad("orders", [entry("o1", 6), entry("o2", 7)], [{"scenario": "orders"}])
    loads = Loads({"sales": sales, "orders": orders})
    assert loads.unattributable() == {"bad-json"}
    assert dict(loads.expected_quarantine("sales")) == {("shardId-0", "3"): 1, ("shardId-0", "4"): 1}
    assert dict(loads.expected_quarantine("orders")) == {("shardId-0", "3"): 1}
    assert loads.expected_other_types("sales") == 2
    assert loads.expected_other_types("orders") == 4  # s1 twice, s2, bad-field: sales events to orders
    assert loads["transactions"].entries == []


def test_a_jobs_totals_and_the_bronze_invariant():
    total = job_totals(
        {"bronze_rows": 10, "silver_rows": 6, "quarantined": 2, "other_types": 1, "batch_id": 4}
    )
    assert total == {
        "bronze_rows": 10,
        "silver_rows": 6,
        "quarantined": 2,
        "duplicates_removed": 0,
        "other_types": 1,
        "late": 0,
    }
    assert not invariant_holds(10, total)  # one row unaccounted for
    assert invariant_holds(10, {**total, "duplicates_removed": 1})
    assert not invariant_holds(11, {**total, "duplicates_removed": 1})  # the job did not read every row


def test_quarantined_positions_count_each_bronze_position():
    rows = pa.table(
        {"shard_id": ["a", "a", "b"], "sequence_number": ["1", "1", "7"], "reason": ["x", "y", "z"]}
    )
    assert quarantined_positions(rows) == Counter({("a", "1"): 2, ("b", "7"): 1})


def test_a_runs_job_settings_point_the_pipeline_at_bronze_and_the_runs_lake(tmp_path):
    target = SimpleNamespace(table_uri=str(tmp_path / "bronze"))
    run = RunContext(spark=None, run_dir=tmp_path, target=target, lake=str(tmp_path / "lake"))
    assert run.job_settings("fraud") == JobSettings(
        source_table=str(tmp_path / "bronze"),
        lake=str(tmp_path / "lake"),
        checkpoint=str((tmp_path / "checkpoints" / "fraud").resolve()),
        trigger="processing-time=1s",
    )


def test_scenario_loads_are_read_from_their_ledger_folder(tmp_path):
    (tmp_path / "ledger-h-1.jsonl").write_text(
        json.dumps({"event_id": "a", "event_time": "t", "shard_id": "s", "sequence_number": "1"}) + "\n"
    )
    (tmp_path / "truth-sales-h-1-0.json").write_text(json.dumps({"malformed": {"a": "not_object"}}))
    load = ScenarioLoad.read("sales", tmp_path)
    assert load.positions() == [("s", "1")]
    assert load.malformed() == {"a": "not_object"}


def _report(pipelines: dict) -> RunReport:
    return RunReport.build(
        reconcile(["a", "b"], ["a", "b"]),
        latencies_s=[1.0],
        throughput_eps=1.0,
        send_rate_eps=1.0,
        table_uri="s3://lake/bronze/events",
        files=1,
        table_version=1,
        micro_batches=1,
        duration_s=1.0,
        started_at="2026-01-02T03:04:05+00:00",
        pipelines=pipelines,
    )


def test_a_failed_pipeline_fails_the_run_and_says_which_checks():
    passing = _report({"ingest": {"ok": True}, "sales": {"ok": True, "rows": 2}})
    assert (
        passing.ok
        and passing.verdict() == "PASS: every acknowledged event landed exactly once; pipelines ok: sales"
    )
    failing = _report(
        {
            "ingest": {"ok": True},
            "sales": {
                "ok": False,
                "missing": 1,
                "quarantined": 3,
                "expected_quarantined": 4,
                "gold_matches_truth": False,
            },
        }
    )
    assert not failing.ok and failing.to_dict()["ok"] is False
    assert failing.verdict() == (
        "FAIL: pipeline sales failed: gold_matches_truth, missing, quarantined 3 != 4"
    )
    text = failing.to_text()
    assert "pipeline sales: FAILED" in text and "  gold_matches_truth    NO" in text


def test_the_comparison_prints_as_a_table():
    report = _report(
        {
            "ingest": {"ok": True},
            "sales": {
                "ok": True,
                "json_vs_delta": {
                    "json": {"bytes": 1500, "files": 2, "one_sales_id_s": 0.5},
                    "delta": {"bytes": 300, "files": 4, "one_sales_id_s": 0.25},
                    "answers_match": True,
                },
            },
        }
    )
    lines = report.to_text().splitlines()
    start = lines.index("  json_vs_delta:")
    assert lines[start + 1 : start + 6] == [
        "                            json         delta",
        "    bytes                  1,500           300",
        "    files                      2             4",
        "    one_sales_id_s         0.500         0.250",
        "    answers_match: yes",
    ]


def test_an_unknown_pipeline_is_a_one_line_usage_error(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lakestack",
            "demo",
            "--pipelines",
            "sales,nope",
            "--reports-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "lakestack demo: error: argument --pipelines: expected names among ingest, sales, fraud, orders (or "
        "orders-cow, orders-mor), found 'nope' (see `lakestack demo --help`)\n"
    )
    assert list(tmp_path.iterdir()) == []  # refused before anything started


def test_layouts_with_the_same_measures_print_side_by_side_with_their_plot():
    report = _report(
        {
            "ingest": {"ok": True},
            "orders": {
                "ok": False,
                "cow": {"matches_expected": True, "files": 4, "read_optimized_query_s": None},
                "mor": {"matches_expected": False, "files": 9, "read_optimized_query_s": 0.5},
                "time_travel": {"version": 7, "ok": True},
                "plot": "orders.svg",
            },
        }
    )
    lines = report.to_text().splitlines()
    start = lines.index("  cow vs mor:")
    assert lines[start + 1 : start + 5] == [
        "                                     cow           mor",
        "    matches_expected                 yes            NO",
        "    files                              4             9",
        "    read_optimized_query_s           n/a         0.500",
    ]
    assert lines[start + 5 : start + 8] == ["  time_travel:", "    version: 7", "    ok: yes"]
    assert report.verdict() == "FAIL: pipeline orders failed: mor.matches_expected"
    assert "\n![orders plot](orders.svg)\n" in report.to_markdown()
