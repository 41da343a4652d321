from __future__ import annotations

import json

from lakestack.reconcile import reconcile
from lakestack.report import RunReport, percentile


def test_clean_run_reconciles_to_zero():
    result = reconcile(["a", "b", "c"], ["c", "a", "b"])
    assert (result.acknowledged, result.landed, result.missing, result.duplicates) == (3, 3, 0, 0)
    assert result.exactly_once


def test_planted_duplicate_is_caught():
    result = reconcile(["a", "b", "c"], ["a", "b", "c", "b"])
    assert result.duplicates == 1
    assert result.missing == 0
    assert result.duplicate_sample == ("b",)
    assert not result.exactly_once


def test_planted_missing_event_is_caught():
    result = reconcile(["a", "b", "c", "d"], ["a", "c", "d"])
    assert result.missing == 1
    assert result.missing_sample == ("b",)
    assert result.duplicates == 0


def test_missing_and_duplicate_in_one_run_do_not_cancel_out():
    # Same row count on both sides: a naive count comparison would call this clean.
    result = reconcile(["a", "b", "c"], ["a", "a", "c"])
    assert (result.missing, result.duplicates, result.landed) == (1, 1, 3)


def test_id_acknowledged_twice_must_land_twice():
    assert reconcile(["a", "a"], ["a", "a"]).exactly_once
    assert reconcile(["a", "a"], ["a"]).missing == 1


def test_landed_but_never_acknowledged_is_counted_apart():
    result = reconcile(["a"], ["a", "zz"])
    assert (result.unacknowledged, result.duplicates, result.missing) == (1, 0, 0)


def test_percentile_interpolates_between_ranks():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def _report(missing: list[str], landed: list[str]) -> RunReport:
    return RunReport.build(
        reconcile(["e1", "e2", "e3"], landed),
        latencies_s=[0.5, 1.0, 1.5],
        throughput_eps=100.0,
        send_rate_eps=120.0,
        table_uri="s3://lake/bronze/events",
        files=2,
        table_version=3,
        micro_batches=3,
        duration_s=12.0,
        started_at="2026-11-21T12:00:00+00:00",
    )


def test_report_json_has_the_documented_keys_and_values(tmp_path):
    report = _report([], ["e1", "e2", "e3"])
    json_path, md_path = report.write(tmp_path / "run")
    data = json.loads(json_path.read_text())
    assert {
        k: data[k]
        for k in (
            "events_sent",
            "events_landed",
            "missing",
            "duplicates",
            "latency_p50_s",
            "latency_p95_s",
            "latency_p99_s",
            "throughput_eps",
            "table_uri",
            "files",
            "ok",
        )
    } == {
        "events_sent": 3,
        "events_landed": 3,
        "missing": 0,
        "duplicates": 0,
        "latency_p50_s": 1.0,
        "latency_p95_s": 1.45,
        "latency_p99_s": 1.49,
        "throughput_eps": 100.0,
        "table_uri": "s3://lake/bronze/events",
        "files": 2,
        "ok": True,
    }
    assert "PASS: every acknowledged event landed exactly once" in md_path.read_text()


def test_report_names_offending_ids_when_it_fails():
    report = _report([], ["e1", "e1", "e3"])
    assert not report.ok
    assert report.verdict() == "FAIL: 1 missing (e.g. e2); 1 duplicated (e.g. e1)"
