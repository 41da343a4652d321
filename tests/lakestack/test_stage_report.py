"""The run report's stage breakdown: text, Markdown, report.json and the PNG of stage times."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from jobs.stages import STAGES
from lakestack.report import RunReport
from lakestack.stage_plot import COLORS, HEIGHT, WIDTH, bars, render

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


def _pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and the filtered scanlines of a PNG this module wrote (filter 0 on every row)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    at, idat = 8, b""
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"IDAT":
            idat += data
        at += 12 + length
    return width, height, zlib.decompress(idat)


def _pixel(raw: bytes, width: int, x: int, y: int) -> tuple[int, int, int]:
    start = y * (width * 3 + 1) + 1 + x * 3
    return tuple(raw[start : start + 3])  # type: ignore[return-value]


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
    width, height, _ = _pixels((tmp_path / "stages.png").read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)


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


def test_one_batch_is_one_bar_stacked_in_stage_order_bottom_up():
    width, _, raw = _pixels(render([RECORD], title="t"))
    # The plot area starts at x=70; the one bar fills 80% of it. Stages total 2.0 s over a 0..2 axis, the
    # plot area is 310 px tall from y=34: 0.5 s of wait is the bottom 77.5 px, 0.25 s of checkpoint the top.
    x = 70 + 400
    assert _pixel(raw, width, x, 34 + 310 - 10) == COLORS["wait_in_stream"]
    assert _pixel(raw, width, x, 34 + 310 - 100) == COLORS["planning_and_reading"]
    assert _pixel(raw, width, x, 34 + 5) == COLORS["checkpoint"]
    # Right of the bar: background.
    assert _pixel(raw, width, 70 + 870, 34 + 310 - 10) == (255, 255, 255)


def test_many_batches_are_averaged_into_at_most_max_bars_and_idle_batches_left_out():
    records = [{**RECORD, "delta_commit": float(n)} for n in range(10)] + [{**RECORD, "rows": 0}]

    grouped = bars(records, max_bars=4)

    assert [b["delta_commit"] for b in grouped] == [1.0, 4.0, 7.0, 9.0]
    assert grouped[0]["wait_in_stream"] == 0.5
