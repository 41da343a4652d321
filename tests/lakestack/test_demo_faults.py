"""`lakestack demo --faults`: the whole pipeline through throttling and S3 SlowDown, still exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_with_faults_lands_every_event_once_and_reports_the_faults(tmp_path):
    # Higher throttle shares than the documented default so that each kind is hit in a run this small. S3 sees
    # thousands of requests (bronze, the pipelines' tables and the JSON sink are all on the emulator's S3), and
    # each SlowDown costs the client a backoff: a twentieth of them is hundreds of faults, and keeps the run
    # within its drain timeouts (a fifth of them made a sales drain outlast its 120 s).
    spec = "put-throttle=0.2,get-throttle=0.3,s3-503=0.05"
    demo = [sys.executable, "-m", "lakestack", "demo", "--pipelines", "ingest,sales,fraud", "--events", "400"]
    demo += ["--rate", "400", "--users", "2"]
    result = subprocess.run(
        [*demo, "--faults", spec, "--faults-seed", "5", "--reports-dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=500,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # Every job drained within its time: the faults slowed the run, they did not stall it.
    assert [note for note in report["notes"] if "did not drain" in note] == []
    # ingest, sales and fraud: 400 events of each scenario they need (sales, transactions).
    assert {k: report[k] for k in ("events_sent", "events_landed", "missing", "duplicates", "ok")} == {
        "events_sent": 800,
        "events_landed": 800,
        "missing": 0,
        "duplicates": 0,
        "ok": True,
    }
    faults = report["faults"]
    assert (faults["spec"], faults["seed"]) == (spec, 5)
    kinds = faults["kinds"]
    assert sorted(kinds) == ["get-throttle", "put-throttle", "s3-503"]
    assert all(kinds[kind]["injected"] > 0 for kind in kinds), kinds
    # The producer resent every throttled entry until it was accepted, and counted each throttle.
    assert kinds["put-throttle"]["survived"] == kinds["put-throttle"]["injected"]
    assert (faults["producer"]["throttled"], faults["producer"]["failed"]) == (
        kinds["put-throttle"]["injected"],
        0,
    )
    assert faults["source"]["throttled"] > 0
    assert "faults injected (seed 5)" in result.stdout
