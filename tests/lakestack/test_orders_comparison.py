"""The cow vs mor comparison: its oracles, its figures on real tables, the plot and the side-by-side table."""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree

import pyarrow as pa
import pytest

from jobs.pipelines._orders_tables import Compactor, CowWriter, MorWriter
from jobs.pipelines.orders import BatchReport, OrdersTables
from lakestack.orders_comparison import (
    OrdersRecorder,
    apply_change_feed,
    compare,
    expected_state,
    fold,
    plot_svg,
    trade_off_markdown,
    trade_off_text,
)
from loadtest.generators import OrdersGenerator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs" / "pipelines"))
from orders_scenarios import T0, at_t0, parse


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def change(op: str, order_id: str, seconds: int, status: str = "placed") -> dict:
    return {
        "op": op,
        "order_id": order_id,
        "order_ts": at(seconds),
        "customer_id": "c",
        "amount": 1.0,
        "status": status,
    }


def _record(recorder: OrdersRecorder, batch, batch_id: int, outcomes, latencies_s) -> None:
    """Hand ``recorder`` one micro-batch of ``batch``'s changes, as the job does after writing it."""
    recorder(
        BatchReport(
            batch_id=batch_id,
            bronze_rows=batch.num_rows,
            quarantined=0,
            other_types=0,
            change_bytes=100 * batch.num_rows,
            read_s=0.5,
            outcomes=outcomes,
            latencies_s=latencies_s,
        ),
        batch,
    )


def test_fold_is_the_generators_rule():
    state = fold(
        [
            change("insert", "a", 1),
            change("update", "a", 3, "paid"),
            change("update", "a", 2, "stale"),  # older: loses
            change("insert", "b", 1),
            change("delete", "b", 5),
            change("update", "b", 4, "late"),  # older than the delete: b stays deleted
        ]
    )
    assert state == [
        {
            "order_id": "a",
            "order_ts": "2026-03-01T12:00:03.000000Z",
            "customer_id": "c",
            "amount": 1.0,
            "status": "paid",
        }
    ]


def test_change_feed_applied_in_commit_order():
    feed = pa.Table.from_pylist(
        [
            {**change("insert", "b", 2), "_change_type": "insert", "_commit_version": 3},
            {**change("update", "a", 1), "_change_type": "update_preimage", "_commit_version": 4},
            {**change("update", "a", 4, "paid"), "_change_type": "update_postimage", "_commit_version": 4},
            {**change("delete", "b", 2), "_change_type": "delete", "_commit_version": 5},
        ]
    )
    start = [{"order_id": "a", "order_ts": "x", "customer_id": "c", "amount": 1.0, "status": "placed"}]
    assert [(r["order_id"], r["status"]) for r in apply_change_feed(start, feed)] == [("a", "paid")]


def test_expected_state_is_the_union_of_the_generators():
    truths = [
        {"expected_state": [{"order_id": "b1"}, {"order_id": "b2"}]},
        {"expected_state": [{"order_id": "a1"}]},
    ]
    assert [r["order_id"] for r in expected_state(truths)] == ["a1", "b1", "b2"]


def test_compare_both_layouts_on_real_tables(tmp_path):
    generator = OrdersGenerator(
        random.Random(5), clock=at_t0, open_orders=15, out_of_order_rate=0.2, duplicate_rate=0.1
    )
    changes = parse([generator.next_event() for _ in range(400)])
    tables = OrdersTables(str(tmp_path / "lake"))
    writers = {"cow": CowWriter(tables, app_id="q", clock=at_t0), "mor": MorWriter(tables, app_id="q")}
    compactor = Compactor(tables, clock=at_t0)
    recorder, compactions = OrdersRecorder(), []
    for batch_id, offset in enumerate(range(0, changes.num_rows, 40)):
        batch = changes.slice(offset, 40)
        outcomes = {layout: writer.write(batch, batch_id) for layout, writer in writers.items()}
        if batch_id % 3 == 2:
            compactions.append(compactor.run())
        stamps = [t.timestamp() for t in batch["event_time"].to_pylist()]
        latencies = {k: tuple(o.visible_at - t for t in stamps) for k, o in outcomes.items()}
        _record(recorder, batch, batch_id, outcomes, latencies)
    truth = generator.ground_truth()
    figures, svg = compare(tables, recorder, [truth], compactions=compactions, acknowledged=400)

    assert figures["ok"] is True
    for layout in ("cow", "mor"):
        assert figures[layout]["matches_expected"] is True
        assert figures[layout]["rows"] == len(truth["expected_state"])
        # 41 repeated deliveries, one of them in the micro-batch after its original (applied, harmlessly).
        assert (truth["duplicates"], figures["duplicates_removed"], figures[layout]["changes"]) == (
            41,
            40,
            360,
        )
        assert figures[layout]["write_amplification"] == round(figures[layout]["bytes_written"] / 40_000, 2)
        assert figures[layout]["latency_p95_s"] >= figures[layout]["latency_p50_s"] > 0
    assert figures["mor"]["compactions"] == 3
    assert figures["mor"]["read_optimized_stale_commits"] == 1  # batch 9 came after the last compaction
    assert figures["cow"]["compactions"] == 0 and figures["cow"]["read_optimized_query_s"] is None
    travel = figures["time_travel"]
    assert (travel["batch_id"], travel["matches_truth_then"], travel["change_feed_matches_truth"]) == (
        4,
        True,
        True,
    )
    assert travel["change_feed_rows"] > 0
    assert figures["invariant_holds"] is True
    ElementTree.fromstring(svg)  # well-formed
    # Latency and files, for each layout: both legends name both.
    assert svg.count(">cow</text>") == 2 and svg.count(">mor</text>") == 2


def test_a_truth_that_counts_unacknowledged_events_is_not_ok(tmp_path):
    tables = OrdersTables(str(tmp_path / "lake"))
    figures, _ = compare(tables, OrdersRecorder(), [{"events": 10, "expected_state": []}], acknowledged=9)
    assert figures["ok"] is False
    assert figures["note"].startswith("the stream acknowledged 9 of the 10 orders events generated")


def test_trade_off_table():
    figures = {
        "cow": {
            "matches_expected": True,
            "write_rows_per_s": 1000.0,
            "bytes_written": 4_000_000,
            "files": 10,
        },
        "mor": {
            "matches_expected": True,
            "write_rows_per_s": 4000.0,
            "bytes_written": 1_000_000,
            "files": 40,
        },
    }
    markdown = trade_off_markdown(figures)
    assert "| write rows/s | 1,000 | 4,000 | 0.25 |" in markdown
    assert "| bytes written | 4,000,000 | 1,000,000 | 4.00 |" in markdown
    assert "| matches expected | yes | yes |  |" in markdown
    assert "| read-optimized query (s) | n/a | n/a |  |" in markdown
    text = trade_off_text(figures).splitlines()
    assert text[0].split() == ["measure", "cow", "mor", "cow/mor"]


def test_plot_without_data_says_so():
    svg = plot_svg({}, {}, datetime.now(UTC).timestamp())
    assert "no data" in svg
    ElementTree.fromstring(svg)


def test_plot_has_ticked_axes_and_draws_cow_and_mor_each_in_its_own_style():
    pytest.importorskip("matplotlib")
    start = 1_000.0
    latency = {
        "cow": [(start + 35, 14.0), (start + 50, 24.0)],
        "mor": [(start + 35, 13.8), (start + 50, 23.7)],
    }
    files = {"cow": [(start + 5, 0), (start + 40, 1)], "mor": [(start + 5, 0), (start + 40, 1)]}

    svg = plot_svg(latency, files, start)

    root = ElementTree.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    # Every panel has a ticked time axis, not only its two ends.
    assert texts.count("seconds into the run") == 2
    assert {"0", "10", "20", "30", "40", "50"} <= set(texts)
    assert texts.count("cow") == 2 and texts.count("mor") == 2
    assert "stroke-dasharray" in svg  # mor's line style differs from cow's where their file steps coincide


def _record_batch(recorder: OrdersRecorder, writer: CowWriter, batch, batch_id: int) -> None:
    _record(recorder, batch, batch_id, {"cow": writer.write(batch, batch_id)}, {"cow": (1.0,)})


def test_a_table_with_no_version_after_its_middle_batch_fails_time_travel_with_a_note(tmp_path):
    """One micro-batch commit, the table's last version: no change feed after it to check (was a raw
    DeltaError from delta-rs' load_cdf, 'Invalid table version')."""
    generator = OrdersGenerator(random.Random(6), clock=at_t0, open_orders=5)
    tables = OrdersTables(str(tmp_path / "lake"))
    recorder = OrdersRecorder()
    _record_batch(
        recorder,
        CowWriter(tables, app_id="q", clock=at_t0),
        parse([generator.next_event() for _ in range(20)]),
        0,
    )
    figures, _ = compare(tables, recorder, [generator.ground_truth()], acknowledged=20)
    assert figures["cow"]["matches_expected"] is True
    assert figures["ok"] is False
    uri = str(tmp_path / "lake" / "orders")
    assert figures["time_travel"] == {
        "enough_versions": False,
        "ok": False,
        "note": f"{uri} has 1 micro-batch commit(s) and ends at version 1, the middle batch's own commit: time "
        "travel needs a later version to read the change feed from. Send the load over more micro-batches "
        "(more events, or a lower --rate).",
    }


def test_time_travel_reads_as_of_a_batch_the_load_produced_not_the_empty_first_one(tmp_path):
    # An empty first trigger (the demo's, before any load), then three batches with changes: the middle of the
    # three is batch 2, a state between two loads, not the empty table of batch 0.
    generator = OrdersGenerator(random.Random(7), clock=at_t0, open_orders=5)
    tables = OrdersTables(str(tmp_path / "lake"))
    recorder = OrdersRecorder()
    writer = CowWriter(tables, app_id="q", clock=at_t0)
    _record_batch(recorder, writer, parse([]), 0)
    for batch_id in (1, 2, 3):
        _record_batch(recorder, writer, parse([generator.next_event() for _ in range(15)]), batch_id)
    figures, _ = compare(tables, recorder, [generator.ground_truth()], acknowledged=45)
    travel = figures["time_travel"]
    assert (travel["batch_id"], travel["batches_with_changes"], travel["ok"]) == (2, 3, True)
    # As of batch 2 the table held 4 orders; the change feed since then has 8 rows and leads to the truth.
    assert (travel["rows_then"], travel["change_feed_rows"], travel["matches_truth_then"]) == (4, 8, True)


def test_with_one_loaded_batch_time_travel_reads_as_of_the_commit_before_it_and_says_so(tmp_path):
    generator = OrdersGenerator(random.Random(8), clock=at_t0, open_orders=5)
    tables = OrdersTables(str(tmp_path / "lake"))
    recorder = OrdersRecorder()
    writer = CowWriter(tables, app_id="q", clock=at_t0)
    _record_batch(recorder, writer, parse([]), 0)
    _record_batch(recorder, writer, parse([generator.next_event() for _ in range(20)]), 1)
    figures, _ = compare(tables, recorder, [generator.ground_truth()], acknowledged=20)
    travel = figures["time_travel"]
    assert (travel["batch_id"], travel["batches_with_changes"], travel["rows_then"], travel["ok"]) == (
        0,
        1,
        0,
        True,
    )
