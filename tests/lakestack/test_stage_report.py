"""The run report's stage breakdown: text, Markdown, report.json and the PNG of stage times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.stages import STAGES
from lakestack.report import RunReport
from lakestack.stage_plot import COLORS, bar_label, bars, unmeasured, write_stage_plot

RECORD = {
    "batch_id": 3,
    "rows": 500,
    "wait_in_stream": 0.5,
    "planning_and_reading": 0.25,
    "transfer_into_spark": 0.5,
    "spark_processing": 0.25,
    "delta_commit": 0.25,
    "checkpoint": 0.25,
}
SUMMARY = {stage: {"p50_s": 0.25, "p95_s": 0.5, "mean_s": 0.3, "batches": 12} for stage in STAGES}


def _report(stages):
    return RunReport(
        events_sent=10,
        events_landed=10,
        missing=0,
        duplicates=0,
        unacknowledged=0,
        latency_p50_s=1.0,
        latency_p95_s=1.5,
        latency_p99_s=1.6,
        throughput_eps=100.0,
        send_rate_eps=100.0,
        table_uri="s3://lake/bronze/events",
        files=1,
        table_version=2,
        micro_batches=12,
        duration_s=10.0,
        started_at="2026-11-21T12:00:00+00:00",
        stages=stages,
    )


def _colours(path: Path) -> set[str]:
    """Every colour in a PNG, as ``#rrggbb``."""
    from matplotlib.image import imread

    pixels = (imread(path)[:, :, :3] * 255).round().astype(int).reshape(-1, 3)
    return {f"#{r:02x}{g:02x}{b:02x}" for r, g, b in {tuple(p) for p in pixels.tolist()}}


def test_the_text_report_prints_p50_p95_and_mean_per_stage():
    text = _report({"summary": SUMMARY, "batches": [RECORD], "plot": "stages.png"}).to_text()

    assert "ingest stages per micro-batch (12 batches with rows)" in text
    assert "  wait_in_stream          0.250s    0.500s    0.300s" in text
    assert "  checkpoint              0.250s    0.500s    0.300s" in text


def test_report_json_carries_the_stages_and_the_plot_is_written_beside_it(tmp_path: Path):
    stages = {"summary": SUMMARY, "batches": [RECORD], "plot": "stages.png"}

    json_path, md_path = _report(stages).write(tmp_path)

    assert json.loads(json_path.read_text())["stages"] == stages
    assert "![stage time per micro-batch](stages.png)" in md_path.read_text()
    assert (tmp_path / "stages.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_one_line_json_keeps_the_stage_summary_and_leaves_the_batches_to_report_json(tmp_path: Path):
    report = _report(
        {"summary": SUMMARY, "batches": [RECORD, {**RECORD, "batch_id": 4}], "plot": "stages.png"}
    )

    line = report.to_json()

    assert "\n" not in line
    assert json.loads(line)["stages"] == {"summary": SUMMARY, "plot": "stages.png"}
    json_path, _ = report.write(tmp_path)
    assert [b["batch_id"] for b in json.loads(json_path.read_text())["stages"]["batches"]] == [3, 4]


def test_a_report_without_stages_has_no_stage_section(tmp_path: Path):
    report = _report(None)

    assert "stages per micro-batch" not in report.to_text()
    report.write(tmp_path)
    assert not (tmp_path / "stages.png").exists()


def test_every_measured_stage_is_drawn_in_its_colour_and_an_unmeasured_one_not_at_all(tmp_path: Path):
    pytest.importorskip("matplotlib")
    records = [{**RECORD, "wait_in_stream": None}, {**RECORD, "batch_id": 4, "wait_in_stream": None}]

    write_stage_plot(tmp_path / "stages.png", records)

    colours = _colours(tmp_path / "stages.png")
    assert {COLORS[s] for s in STAGES if s != "wait_in_stream"} <= colours
    assert COLORS["wait_in_stream"] not in colours
    assert unmeasured(records) == ["wait_in_stream"]
    assert unmeasured([RECORD]) == []


def test_many_batches_are_averaged_into_at_most_max_bars_and_idle_batches_left_out():
    records = [{**RECORD, "delta_commit": float(n)} for n in range(10)] + [{**RECORD, "rows": 0}]

    grouped = bars(records, max_bars=4)

    assert [b["delta_commit"] for b in grouped] == [1.0, 4.0, 7.0, 9.0]
    assert grouped[0]["wait_in_stream"] == 0.5
    assert [(b["first_batch"], b["last_batch"]) for b in grouped] == [(3, 3)] * 4
    assert grouped[0]["rows"] == 500


def test_a_bar_is_labelled_with_its_batch_id_and_rows():
    one = bars([{**RECORD, "rows": 17837}])[0]
    runs = bars([{**RECORD, "batch_id": n, "rows": 100 * n} for n in range(1, 5)], max_bars=2)

    assert bar_label(one) == "batch 3\n17,837 rows"
    assert [bar_label(b) for b in runs] == ["batches 1-2\n~150 rows each", "batches 3-4\n~350 rows each"]


def test_the_markdown_explains_the_latency_gap_and_names_an_unmeasured_wait():
    measured = _report({"summary": SUMMARY, "batches": [RECORD], "plot": "stages.png"}).to_markdown()
    without_wait = {k: v for k, v in SUMMARY.items() if k != "wait_in_stream"}
    unmeasured_wait = _report(
        {"summary": without_wait, "batches": [RECORD], "plot": "stages.png"}
    ).to_markdown()

    assert "End-to-end latency runs from each event's event_time" in measured
    assert "Wait in the stream is not measured in this run" not in measured
    assert "Wait in the stream is not measured in this run" in unmeasured_wait
