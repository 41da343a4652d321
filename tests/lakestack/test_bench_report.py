"""The bench report: the demo's keys plus the bench's, also when the run never got as far as measuring."""

from __future__ import annotations

import dataclasses
import json

from lakestack.bench.cost import RunEstimate
from lakestack.bench.lifecycle import Outcome, Teardown
from lakestack.bench.report import BenchReport
from lakestack.bench.settings import BenchSettings
from lakestack.reconcile import reconcile
from lakestack.report import RunReport
from lakestack.soak import Sample, SoakResult, evaluate

ESTIMATE = RunEstimate(0.8, 0.84, 0.83, 600_000, 0.57, 0.165, {"stack_hours": 0.7, "data": 0.1}, ("50 min",))


def _run() -> RunReport:
    return RunReport.build(
        reconcile(["a", "b"], ["a", "b"]),
        latencies_s=[1.0],
        throughput_eps=2.0,
        send_rate_eps=2.0,
        table_uri="s3://lake/bronze/events",
        files=1,
        table_version=1,
        micro_batches=1,
        duration_s=3.0,
        started_at="2027-01-15T08:00:00+00:00",
    )


def test_an_interrupted_run_keeps_every_key_with_nothing_measured(tmp_path):
    outcome = Outcome(status="interrupted", detail="SIGTERM during up", signum=15, teardown=Teardown(True))
    report = BenchReport(
        BenchSettings(stack="local", reports_dir=tmp_path), tmp_path / "run", ESTIMATE, outcome
    )
    data = report.to_dict()
    demo_keys = [f.name for f in dataclasses.fields(RunReport) if f.name != "timeline"]
    assert {key: data[key] for key in demo_keys} == dict.fromkeys(demo_keys)
    assert {k: data[k] for k in ("ok", "stack", "estimated_cost_usd", "teardown", "outcome")} == {
        "ok": False,
        "stack": "local",
        "estimated_cost_usd": 0.8,
        "teardown": "complete",
        "outcome": "interrupted: SIGTERM during up",
    }
    files = report.write()
    assert json.loads(files.json.read_text())["plots"] == []
    assert (
        files.markdown.read_text().splitlines()[2] == "**INTERRUPTED: SIGTERM during up; teardown complete**"
    )


def test_a_cloud_run_shows_what_the_stream_counted_beside_the_ledger(tmp_path):
    outcome = Outcome(report=_run(), teardown=Teardown(True))
    outcome.phases.update(up=600.0, ready=60.0, load=600.0, drain=30.0, measure=20.0)
    facts = {
        "stream_name": "lakestack-dev-events",
        "cloudwatch": {
            "incoming_records": 2.0,
            "max_iterator_age_ms": 2500.0,
            "write_throttled_records": 0.0,
            "read_throttled_calls": None,
        },
    }
    report = BenchReport(BenchSettings(stack="dev", reports_dir=tmp_path), tmp_path, ESTIMATE, outcome, facts)
    markdown = report.to_markdown()
    assert "| records put (IncomingRecords) | 2 (the ledger acknowledged 2) |" in markdown
    assert "| highest reader lag (GetRecords.IteratorAgeMilliseconds) | 2,500 ms |" in markdown
    assert "| reads throttled (ReadProvisionedThroughputExceeded) | n/a |" in markdown
    assert (
        "| phases finished | up 600.0 s, ready 60.0 s, load 600.0 s, drain 30.0 s, measure 20.0 s |"
        in markdown
    )
    assert "| stream_name | lakestack-dev-events |" in markdown
    assert report.to_dict()["target"]["cloudwatch"]["max_iterator_age_ms"] == 2500.0
    assert (report.ok, report.to_dict()["ok"]) == (True, True)


def _soak(rss: list[float]) -> SoakResult:
    samples = [
        Sample(t, {"rss_mib": r, "checkpoint_files:ingest": 10, "batches:ingest": t, "table_files:bronze": 3})
        for t, r in zip((0.0, 60.0, 120.0, 180.0), rss, strict=True)
    ]
    return evaluate(
        samples,
        warmup_s=60,
        retain=100,
        compactions={"bronze": [(90.0, 1), (150.0, 1)]},
        landed=[(70.0, 1.0), (170.0, 1.1)],
    )


def test_a_completed_soak_with_a_failed_budget_exits_1_naming_it(tmp_path):
    settings = BenchSettings(stack="local", reports_dir=tmp_path, soak_s=180.0, soak_sample_s=60.0)
    outcome = Outcome(report=_run(), teardown=Teardown(True))
    growing = BenchReport(settings, tmp_path / "a", ESTIMATE, outcome, soak=_soak([1000, 1000, 1100, 1200]))
    assert (growing.exit_code, growing.ok, growing.to_dict()["ok"]) == (1, False, False)
    assert growing.verdict() == (
        "PASS: every acknowledged event landed exactly once; soak budgets FAILED: RSS growth (rss_mib); "
        "teardown complete"
    )
    assert growing.to_dict()["soak"]["failed"] == ["RSS growth (rss_mib)"]
    flat = BenchReport(settings, tmp_path / "b", ESTIMATE, outcome, soak=_soak([1000, 1000, 1000, 1000]))
    assert (flat.exit_code, flat.to_dict()["ok"]) == (0, True)
    markdown = flat.write().markdown.read_text()
    assert "| RSS growth | `rss_mib` | < 5%/h of 1,000 MiB | +0.00%/h (+0.0 MiB/h) | pass |" in markdown
    assert "| `batches:ingest` | 180.0 | +3,600.000 |" in markdown
    assert "![Resident memory of the process tree" in markdown


def test_an_interrupted_soak_still_reports_what_was_sampled(tmp_path):
    settings = BenchSettings(stack="local", reports_dir=tmp_path, soak_s=1800.0)
    outcome = Outcome(status="interrupted", detail="SIGINT during load", signum=2, teardown=Teardown(True))
    report = BenchReport(settings, tmp_path / "run", ESTIMATE, outcome, soak=_soak([1000, 1000, 1000, 1000]))
    assert report.exit_code == 130
    files = report.write()
    document = json.loads(files.json.read_text())
    assert (document["ok"], document["soak"]["samples"], len(document["soak"]["series"]["rss_mib"])) == (
        False,
        4,
        4,
    )
    assert "## Soak" in files.markdown.read_text()
    assert (tmp_path / "run" / "plots" / "soak_rss.png").read_bytes()[:4] == b"\x89PNG"
