"""The orders job in Spark: bronze (Delta stream) -> both layouts, quarantine, restarts, a kill mid-batch."""

from __future__ import annotations

import argparse
import json
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from orders_scenarios import as_expected, bronze_rows, orders_payloads

from jobs.__main__ import main as jobs_main
from jobs.errors import SettingsError
from jobs.lake import DeltaRsEngine
from jobs.pipelines import orders
from jobs.pipelines.orders import OrdersJob, OrdersSettings, OrdersTables, read_optimized, snapshot

NOT_ORDERS = [
    b'{"event_type":"sales","event_id":"s1","event_time":"2026-03-01T12:00:00.000000Z","SalesId":1}',
    b'{"event_type":"transactions","event_id":"t1","event_time":"2026-03-01T12:00:00.000000Z"}',
]
MALFORMED = [
    b"not json at all",
    b'{"event_type":"orders","event_id":"bad1","event_time":"2026-03-01T12:00:00.000000Z","change_id":1}',
    b'{"event_type":"orders","event_id":"bad2","event_time":"2026-03-01T12:00:00.000000Z","change_id":7,'
    b'"op":"upsert","order_id":"x","order_ts":"2026-03-01T12:00:00Z","customer_id":"c","amount":1,"status":"p"}',
]


def fill_bronze(uri: str, payloads: list[bytes], *, per_commit: int = 60, first: int = 0) -> int:
    """Append the payloads to a bronze table, ``per_commit`` to a commit (one file each); return the count."""
    table = DeltaRsEngine().table(uri)
    start = table.transaction_version("ingest")
    batch = 0 if start is None else start + 1
    for at in range(0, len(payloads), per_commit):
        table.append(
            bronze_rows(payloads[at : at + per_commit], first_sequence=first + at),
            app_id="ingest",
            batch_id=batch,
        )
        batch += 1
    return len(payloads)


def settings(tmp_path: Path, layout: str, **overrides) -> OrdersSettings:
    values = {
        "layout": overrides.pop("layout_name", layout),
        "lake": str(tmp_path / "lake"),
        "source_table": str(tmp_path / "bronze"),
        "checkpoint": str(tmp_path / f"checkpoint-{layout}"),
        "trigger": "available-now",
        "compact_every": 3,
        "max_files_per_trigger": 2,
        # Tombstones are kept for the scenario's (past) order times.
        "tombstone_retention": timedelta(days=3650),
    }
    return OrdersSettings(**{**values, **overrides})


def drain(spark, job_settings: OrdersSettings) -> OrdersJob:
    job = OrdersJob(job_settings)
    query = job.start(spark)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        job.close()
    assert query.exception() is None
    return job


@pytest.mark.parametrize("layout", ["cow", "mor"])
def test_both_layouts_from_bronze_end_in_the_expected_state_and_restart_where_they_stopped(
    spark, tmp_path, layout
):
    payloads, _ = orders_payloads(31, 300, out_of_order_rate=0.2, duplicate_rate=0.1)
    more, expected = orders_payloads(31, 500, out_of_order_rate=0.2, duplicate_rate=0.1)
    assert more[:300] == payloads
    bronze = str(tmp_path / "bronze")
    fill_bronze(bronze, payloads[:150] + NOT_ORDERS + MALFORMED + payloads[150:], per_commit=100)
    first = drain(spark, settings(tmp_path, layout, compact_every=1))
    fill_bronze(bronze, more[300:], per_commit=100, first=10_000)
    second = drain(spark, settings(tmp_path, layout, compact_every=1))

    tables = OrdersTables(str(tmp_path / "lake"))
    assert as_expected(snapshot(None, layout, tables)) == expected
    reports = first.reports + second.reports
    # Invariant (C1): bronze rows = changes + quarantined + repeats dropped + other types.
    bronze_total = sum(r.bronze_rows for r in reports)
    assert bronze_total == 500 + len(NOT_ORDERS) + len(MALFORMED)
    assert bronze_total == sum(
        r.outcome.changes + r.quarantined + r.outcome.duplicates + r.other_types for r in reports
    )
    assert sum(r.other_types for r in reports) == 2
    quarantined = tables.quarantine.read().to_pylist()
    assert sorted(r["reason"][:40] for r in quarantined) == sorted(
        [
            "payload is not a JSON object: 'not json ",
            "field op is missing; field order_id is m",
            "field op: expected insert, update or del",
        ]
    )
    assert {r["shard_id"] for r in quarantined} == {"shardId-000000000000"}
    # The second run resumed: its batches come after the first run's, none repeated.
    assert [r.batch_id for r in reports] == list(range(len(reports)))
    assert all(min(r.latencies_s[layout]) > 0 for r in reports if r.outcome.changes)
    assert sum(r.change_bytes for r in reports) == sum(len(p) for p in more)
    if layout == "mor":
        base = read_optimized(None, tables)
        assert base.num_rows > 0
        assert first.compaction is not None and first.compaction.outcomes
        orders.compact(tables, spark=spark, tombstone_retention=timedelta(days=3650))
        assert as_expected(read_optimized(None, tables)) == expected


def test_one_query_feeds_both_layouts_side_by_side(spark, tmp_path):
    payloads, expected = orders_payloads(32, 150, out_of_order_rate=0.2, duplicate_rate=0.1)
    fill_bronze(str(tmp_path / "bronze"), payloads, per_commit=50)
    seen: list[tuple[int, int]] = []
    job_settings = settings(tmp_path, "cow", compact_every=1)
    job = OrdersJob(
        job_settings,
        layouts=("cow", "mor"),
        on_batch=lambda report, changes: seen.append((report.batch_id, changes.count())),
    )
    query = job.start(spark)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        job.close()
    tables = OrdersTables(str(tmp_path / "lake"))
    assert as_expected(snapshot(None, "cow", tables)) == expected
    assert as_expected(snapshot(None, "mor", tables)) == expected
    assert [batch for batch, _ in seen] == [r.batch_id for r in job.reports]
    assert sum(n for _, n in seen) == sum(
        r.outcomes["mor"].changes + r.outcomes["mor"].duplicates for r in job.reports
    )
    assert all(set(r.outcomes) == set(r.latencies_s) == {"cow", "mor"} for r in job.reports)
    # The figures a monitor sums (the demo's drain line), one file per batch next to the checkpoint.
    metrics = job_settings.job.batch_metrics()
    assert metrics.batch_ids() == [r.batch_id for r in job.reports]
    totals = metrics.totals()
    assert (totals["bronze_rows"], totals["other_types"], totals["quarantined"]) == (150, 0, 0)
    assert totals["changes"] + totals["duplicates_removed"] == 150
    frame = snapshot(spark, "mor", tables)
    assert frame.columns == ["order_id", "order_ts", "customer_id", "amount", "status", "order_date"]
    assert sorted(r["order_id"] for r in frame.collect()) == [r["order_id"] for r in expected]


def test_a_batch_is_written_where_dataframes_have_no_to_arrow_method(spark, tmp_path, monkeypatch):
    """Spark 3.5 (Synapse) has no ``DataFrame.toArrow``: nothing in the job's path needs it."""
    from jobs.sources import read_delta

    payloads, expected = orders_payloads(7, 40)
    bronze = str(tmp_path / "bronze")
    fill_bronze(bronze, payloads + NOT_ORDERS)
    frame = read_delta(spark, bronze)
    for cls in type(frame).__mro__:
        if "toArrow" in vars(cls):
            monkeypatch.delattr(cls, "toArrow")
    assert not hasattr(type(frame), "toArrow")
    job = OrdersJob(settings(tmp_path, "cow"))
    try:
        report = job.write_batch("lakestack-orders-test", frame, 0)
    finally:
        job.close()
    assert (report.bronze_rows, report.other_types, report.quarantined) == (42, 2, 0)
    assert as_expected(snapshot(None, "cow", OrdersTables(str(tmp_path / "lake")))) == expected


def test_a_batch_without_changes_still_commits_its_transaction_in_each_layout(spark, tmp_path):
    """One commit per micro-batch in ``orders`` as in ``orders_changes``, also when the batch holds no orders
    change (the demo's first trigger, before any load): the comparison's time travel picks a batch's commit."""
    from jobs.sources import read_delta

    bronze = str(tmp_path / "bronze")
    fill_bronze(bronze, NOT_ORDERS)
    job = OrdersJob(settings(tmp_path, "cow", compact_every=0), layouts=("cow", "mor"))
    try:
        report = job.write_batch("lakestack-orders-test", read_delta(spark, bronze), 0)
    finally:
        job.close()
    assert (report.bronze_rows, report.other_types, report.quarantined) == (2, 2, 0)
    assert {layout: outcome.committed for layout, outcome in report.outcomes.items()} == {
        "cow": True,
        "mor": True,
    }
    tables = OrdersTables(str(tmp_path / "lake"))
    last = {name: getattr(tables, name).commits()[-1] for name in ("orders", "changes")}
    assert {name: (c.app_id, c.batch_id) for name, c in last.items()} == {
        "orders": ("lakestack-orders-test", 0),
        "changes": ("lakestack-orders-test", 0),
    }
    # Delta's own transaction record, which a replay is checked against, not only the commit's metadata.
    assert (
        tables.orders.transaction_version("lakestack-orders-test"),
        tables.changes.transaction_version("lakestack-orders-test"),
    ) == (0, 0)
    assert tables.orders.read().num_rows == 0
    versions = (tables.orders.version(), tables.changes.version())
    # The batch replayed after a restart: nothing is committed again in either layout.
    again = OrdersJob(settings(tmp_path, "cow", compact_every=0), layouts=("cow", "mor"))
    try:
        replayed = again.write_batch("lakestack-orders-test", read_delta(spark, bronze), 0)
    finally:
        again.close()
    assert {layout: outcome.committed for layout, outcome in replayed.outcomes.items()} == {
        "cow": False,
        "mor": False,
    }
    assert (tables.orders.version(), tables.changes.version()) == versions


def test_no_rows_reach_the_driver_and_every_table_is_written_by_delta_spark(spark, tmp_path, monkeypatch):
    """The payloads, quarantined rows and changes stay on the executors; the figures still add up."""
    from deltalake import DeltaTable

    from jobs.sources import read_delta

    payloads, expected = orders_payloads(5, 30)
    bronze = str(tmp_path / "bronze")
    fill_bronze(bronze, payloads + NOT_ORDERS + MALFORMED)
    collected: list[list[str]] = []
    real_to_arrow = orders.to_arrow

    def recording(frame):
        collected.append(list(frame.columns))
        return real_to_arrow(frame)

    monkeypatch.setattr(orders, "to_arrow", recording)
    job = OrdersJob(settings(tmp_path, "cow", compact_every=1), layouts=("cow", "mor"))
    try:
        report = job.write_batch("lakestack-orders-test", read_delta(spark, bronze), 0)
    finally:
        job.close()
    assert collected == []
    assert (report.bronze_rows, report.other_types, report.quarantined) == (35, 2, 3)
    assert report.change_bytes == sum(len(p) for p in payloads)
    tables = OrdersTables(str(tmp_path / "lake"))
    assert tables.quarantine.transaction_version("lakestack-orders-test") == 0
    assert sorted(r["batch_id"] for r in tables.quarantine.read().to_pylist()) == [0, 0, 0]
    assert as_expected(snapshot(None, "cow", tables)) == expected
    assert as_expected(read_optimized(None, tables)) == expected  # compacted in the batch (every commit)
    writers = {}
    for name in ("orders", "orders_tombstones", "orders_changes", "orders_base", "orders_quarantine"):
        history = DeltaTable(str(tmp_path / "lake" / name)).history()
        writers[name] = sorted({c["operation"] for c in history if "Delta-Lake/" in str(c.get("engineInfo"))})
    assert writers == {
        "orders": ["CREATE TABLE", "MERGE"],
        "orders_tombstones": ["CREATE TABLE", "MERGE"],
        "orders_changes": ["CREATE TABLE", "WRITE"],
        "orders_base": ["CREATE TABLE", "MERGE"],
        "orders_quarantine": ["CREATE TABLE", "WRITE"],
    }


_CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from datetime import timedelta
    from pathlib import Path
    from jobs.lake import LakeTable
    from jobs.pipelines import _orders_spark, orders
    from jobs.session import build_session

    lake, bronze, checkpoints, markers = sys.argv[1:5]
    append, merge = LakeTable.append, _orders_spark._merge

    def stall(uri, batch_id):
        # Batch 2: its first table write lands, then the batch stalls until the process is killed.
        if batch_id == 2 and not uri.endswith(("_quarantine", "orders_base")):
            layout = "mor" if uri.endswith("orders_changes") else "cow"
            Path(markers, layout).write_text("batch 2 half-written")
            time.sleep(300)

    def stalling_append(self, data, **kwargs):
        result = append(self, data, **kwargs)
        stall(self.uri, kwargs.get("batch_id"))
        return result

    def stalling_merge(spark, uri, **kwargs):
        merge(spark, uri, **kwargs)
        stall(uri, kwargs["txn"][1])

    LakeTable.append, _orders_spark._merge = stalling_append, stalling_merge
    spark = build_session("orders-kill-child")
    for layout in ("cow", "mor"):
        settings = orders.OrdersSettings(
            layout=layout, lake=lake, source_table=bronze, checkpoint=f"{checkpoints}/checkpoint-{layout}",
            trigger="processing-time=0.5s", compact_every=2, max_files_per_trigger=1,
            tombstone_retention=timedelta(days=3650),
        )
        orders.OrdersJob(settings).start(spark)
    spark.streams.awaitAnyTermination(300)
    """
)


def test_killed_mid_batch_then_restarted_ends_in_the_expected_state(spark, tmp_path, killable_child):
    payloads, expected = orders_payloads(33, 240, out_of_order_rate=0.2, duplicate_rate=0.1)
    bronze, lake = str(tmp_path / "bronze"), str(tmp_path / "lake")
    fill_bronze(bronze, payloads, per_commit=80)  # three files: batches 0 and 1 land, batch 2 is killed
    markers = tmp_path / "markers"
    markers.mkdir()
    child = killable_child(_CHILD, lake, bronze, str(tmp_path), str(markers))
    try:
        child.wait_until(lambda: len(list(markers.iterdir())) == 2, "half-wrote batch 2 in both layouts")
    finally:
        child.kill()
    assert sorted(p.name for p in markers.iterdir()) == ["cow", "mor"]

    tables = OrdersTables(lake)
    for layout in ("cow", "mor"):
        job_settings = settings(tmp_path, layout, max_files_per_trigger=2, compact_every=2)
        app_id = _app_id(job_settings)
        landed = {name: t.transaction_version(app_id) for name, t in tables.layout_tables(layout).items()}
        # Killed right after batch 2's first table write: cow's tombstones (the batch deletes orders) are
        # in, its MERGE into orders is not; mor's change-log append is in.
        if layout == "cow":
            assert landed == {"orders": 1, "orders_tombstones": 2}
        else:
            assert landed["orders_changes"] == 2
        job = drain(spark, job_settings)
        assert job.reports[0].batch_id == 2  # Spark replays the batch it never finished
        assert as_expected(snapshot(None, layout, tables)) == expected
    orders.compact(tables, spark=spark, tombstone_retention=timedelta(days=3650))
    assert as_expected(read_optimized(None, tables)) == expected


def _app_id(job_settings: OrdersSettings) -> str:
    meta = json.loads((Path(job_settings.checkpoint or "") / "metadata").read_text())
    return f"lakestack-orders-{job_settings.layout}-{meta['id']}"


# -- settings and the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"layout_name": "hudi"}, "--layout: expected one of cow, mor, found 'hudi'"),
        ({"source_table": None}, "--source-table: expected a URI or path, found nothing"),
        ({"trigger": "every-5s"}, "--trigger: expected 'available-now' or 'processing-time=<N>s'"),
        ({"compact_every": -1}, "--compact-every: expected a whole number of change commits, 0 or more"),
        ({"compact_only": True}, "--compact: only the mor layout has a change log"),
    ],
)
def test_bad_settings_are_named(tmp_path, overrides, message):
    with pytest.raises(SettingsError, match=message):
        settings(tmp_path, "cow", **overrides)


def test_compact_needs_no_stream(spark, tmp_path, caplog):
    lake = str(tmp_path / "lake")
    OrdersTables(lake).create("mor")
    args = ["--layout", "mor", "--lake", lake, "--compact"]
    with caplog.at_level("INFO", logger="jobs.pipelines.orders"):
        parser = argparse.ArgumentParser()
        orders.add_arguments(parser)
        assert orders.run(orders.settings_from_args(parser.parse_args(args)), spark=spark) == 0
    assert "compaction found nothing to merge: base merged through log_seq -1" in caplog.text


def test_compact_of_a_lake_without_a_change_log_is_refused(tmp_path, capsys):
    # A mistyped --lake used to "compact" nothing and exit 0.
    lake = tmp_path / "lake"
    assert jobs_main(["orders", "--layout", "mor", "--lake", str(lake), "--compact"]) == 2
    assert capsys.readouterr().err == (
        f"error: --lake: expected a Delta table at {lake}/orders_changes, found none (no _delta_log). Check the "
        "URI, or run the job that writes that table first.\n"
    )
    assert not lake.exists()


def test_a_bad_flag_is_one_line_and_exit_2(tmp_path, capsys):
    code = jobs_main(
        ["orders", "--layout", "cow", "--lake", str(tmp_path), "--tombstone-retention", "forever"]
    )
    assert code == 2
    assert capsys.readouterr().err.startswith("error: --tombstone-retention: expected a duration like 30s")
