"""The demo's progress lines while it drains and checks: each job against what it should reach. No Spark."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from lakestack.demo import DemoRun, DemoSettings, Progress, _Throttled, _with_ticks


def _run(tmp_path, *, bronze_rows, totals) -> DemoRun:
    run = DemoRun(DemoSettings(reports_dir=tmp_path, pipelines=("ingest", "sales")), Progress())
    metrics = SimpleNamespace(totals=lambda: totals)
    run._context = SimpleNamespace(  # type: ignore[assignment]
        bronze_rows=bronze_rows, job_settings=lambda name: SimpleNamespace(batch_metrics=lambda: metrics)
    )
    return run


def test_ingest_drains_towards_the_events_the_stream_acknowledged(tmp_path):
    run = _run(tmp_path, bronze_rows=lambda: 28_512, totals={})
    assert run._drain_progress("ingest", 30_000) == (
        "draining ingest: 28,512 of 30,000 acknowledged events landed in bronze"
    )


def test_a_downstream_job_drains_towards_the_rows_bronze_holds(tmp_path):
    run = _run(tmp_path, bronze_rows=lambda: 30_000, totals={"bronze_rows": 21_004, "silver_rows": 20_001})
    assert run._drain_progress("sales", 30_000) == "draining sales: read 21,004 of 30,000 bronze rows"


def test_a_table_that_cannot_be_read_yet_leaves_the_line_without_figures(tmp_path):
    def missing() -> int:
        raise FileNotFoundError("_delta_log/00000000000000000003.json")

    run = _run(tmp_path, bronze_rows=missing, totals={})
    assert run._drain_progress("sales", 30_000) == "draining sales"


def test_a_throttled_line_is_made_again_only_after_its_interval():
    made: list[int] = []

    def make() -> str:
        made.append(len(made))
        return f"line {len(made)}"

    fresh, kept = _Throttled(make, every_s=0.0), _Throttled(make, every_s=3600.0)
    assert [fresh(), fresh()] == ["line 1", "line 2"]
    assert [kept(), kept()] == ["line 3", "line 3"]


def test_a_long_check_ticks_while_it_runs_and_returns_its_figures():
    released = threading.Event()
    ticks: list[str] = []

    def check() -> dict[str, bool]:
        assert released.wait(timeout=30), "never ticked"
        return {"ok": True}

    def tick() -> None:
        ticks.append("tick")
        released.set()

    assert _with_ticks(check, tick=tick, every_s=0.01) == {"ok": True}
    assert ticks[0] == "tick"


def test_a_check_that_fails_raises_its_own_error():
    def check() -> None:
        raise ValueError("sales table unreadable")

    with pytest.raises(ValueError, match="sales table unreadable"):
        _with_ticks(check, tick=lambda: None, every_s=0.01)
