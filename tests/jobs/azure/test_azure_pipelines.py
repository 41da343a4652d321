"""The sales, fraud and orders pipelines as they run on Synapse (Spark 3.5): bronze through Spark's own Delta
source.

The pipeline runs here are for Synapse's line: they run in .venv-spark35 (pyspark 3.5 with delta-spark 3.2.1,
Synapse's Spark and Delta, `make test-spark35`), so a 4.0-only API in these pipelines fails CI. On Spark 4.0 the
same pipelines, on the same Spark Delta source, are the subject of tests/jobs/pipelines and of the demos
(tests/lakestack/test_demo.py: sales and fraud on the Azure path, sales and orders on the AWS path), so in the
main environment only the column check below runs (it also compares the Python source's columns, which
.venv-spark35 does not install). Bronze is written by delta-rs (as the ingest job writes it) and streamed by
Spark's own Delta source from the pinned jars, which reads only the files the Delta log commits (a file source
over the folder would also list delta-rs's staging files, `part-...parquet#N`, renamed a moment later, and fail a
batch now and then). Everything from there on is the code Synapse runs: the extra columns Spark's reader gets
(`jobs.sources._delta_spark`), the pipelines' transforms, the fraud state function under
`applyInPandasWithState` with the RocksDB state store, the foreachBatch writers and the delta-rs sinks.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.ingest import BRONZE_COLUMNS, bronze_schema
from jobs.pipelines import fraud, orders, sales
from jobs.pipelines._job import JobSettings, run_until_done
from jobs.sources import DeltaStreamOptions, read_delta_stream
from jobs.sources._delta_spark import read_spark_delta_stream, spark_has_delta_source, with_commit_columns

SPARK_35 = os.environ.get("LAKESTACK_EXPECT_SPARK") == "3.5"
# Each pipeline run below costs 40-50 s of a 2-core CI box; on Spark 4.0 they repeat what other suites prove.
synapse_line_only = pytest.mark.skipif(
    not SPARK_35,
    reason="Synapse's Spark line (3.5) only: `make test-spark35` runs it; 4.0 is tests/jobs/pipelines",
)
STREAM_COLUMNS = [
    ("data", "binary"),
    ("partition_key", "string"),
    ("shard_id", "string"),
    ("sequence_number", "string"),
    ("arrival_time", "timestamp"),
    ("ingest_time", "timestamp"),
    ("batch_id", "bigint"),
    ("_commit_version", "bigint"),
    ("_commit_timestamp", "timestamp"),
]
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class RecordingDelta:
    """The session as ``read_spark_delta_stream`` sees it, recording what Spark's Delta source is asked
    (``format("delta").options(...).load(uri)``) and handing the call on to the session's real reader."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.conf = spark.conf
        self.asked: dict[str, Any] = {}

    @property
    def readStream(self) -> RecordingDelta:
        return self

    def format(self, name: str) -> RecordingDelta:
        self.asked["format"] = name
        return self

    def options(self, **options: str) -> RecordingDelta:
        self.asked["options"] = dict(options)
        return self

    def load(self, uri: str) -> Any:
        self.asked["load"] = uri
        return self.spark.readStream.format(self.asked["format"]).options(**self.asked["options"]).load(uri)


class Bronze:
    """A bronze table written the way the ingest job writes it: created empty first (as the ingest job does at
    start-up), then one delta-rs append (one file) per commit."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.sequence = 0
        self.commits = 0
        DeltaTable.create(uri, bronze_schema())

    def commit(self, payloads: list[bytes]) -> None:
        now = datetime.now(UTC)
        rows = len(payloads)
        table = pa.Table.from_arrays(
            [
                pa.array(payloads, pa.binary()),
                pa.array(["k"] * rows),
                pa.array(["partition-0"] * rows),
                pa.array([str(self.sequence + i) for i in range(rows)]),
                pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                pa.array([self.commits] * rows, pa.int64()),
            ],
            schema=bronze_schema(),
        )
        write_deltalake(self.uri, table, mode="append")
        self.sequence += rows
        self.commits += 1


def _spark_delta(spark: Any, bronze: Bronze) -> Any:
    recording = RecordingDelta(spark)
    frame = read_spark_delta_stream(recording, bronze.uri, DeltaStreamOptions(max_files_per_trigger=1))
    assert recording.asked == {"format": "delta", "options": {"maxFilesPerTrigger": "1"}, "load": bronze.uri}
    return frame


def _read(uri: str) -> list[dict]:
    return DeltaTable(uri).to_pyarrow_table().to_pylist()


def _time(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def test_spark_delta_rows_have_the_python_sources_columns(spark, tmp_path):
    bronze = Bronze(str(tmp_path / "bronze"))
    bronze.commit([b"{}"])
    frame = _spark_delta(spark, bronze)

    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == STREAM_COLUMNS
    assert [c for c, _ in STREAM_COLUMNS[:7]] == list(BRONZE_COLUMNS)
    # The change feed's own columns (Delta's order) are put in the Python source's order.
    feed = spark.createDataFrame(
        [(1, "insert", 4, T0)],
        "id BIGINT, _change_type STRING, _commit_version BIGINT, _commit_timestamp TIMESTAMP",
    )
    moved = with_commit_columns(feed, change_feed=True)
    assert moved.columns == ["id", "_commit_version", "_commit_timestamp", "_change_type"]
    assert [tuple(r) for r in moved.collect()] == [(1, 4, T0.replace(tzinfo=None), "insert")]
    # The pinned Delta jars are in every local session (both Spark lines): auto picks Spark's own reader,
    # which gives the same columns as the Python source.
    assert spark_has_delta_source(spark) is True
    chosen = read_delta_stream(spark, bronze.uri)
    assert [(f.name, f.dataType.simpleString()) for f in chosen.schema.fields] == STREAM_COLUMNS
    if not SPARK_35:
        python = read_delta_stream(spark, bronze.uri, reader="python")
        assert [(f.name, f.dataType.simpleString()) for f in python.schema.fields] == STREAM_COLUMNS


def _sale(sales_id: int, product: str, at_s: float, amount: str) -> bytes:
    return json.dumps(
        {
            "event_type": "sales",
            "event_id": f"e{sales_id}",
            "event_time": _time(at_s),
            "SalesId": sales_id,
            "ProductName": product,
            "SalesDateTime": _time(at_s),
            "SalesAmount": amount,
        }
    ).encode()


@synapse_line_only
def test_sales_on_spark_delta_rows_lands_every_row_once(spark, tmp_path):
    bronze = Bronze(str(tmp_path / "bronze"))
    job = JobSettings(
        source_table=bronze.uri,
        lake=str(tmp_path / "lake"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
    )
    settings = sales.SalesSettings(job=job, json_sink=str(tmp_path / "json"), max_files_per_trigger=1)
    s1 = _sale(1, "Widget", 0, "10.50")
    s2 = _sale(2, "Widget", 25, "2.25")
    twelve = json.dumps({**json.loads(_sale(9, "Widget", 1, "1")), "SalesAmount": "twelve"}).encode()
    txn = json.dumps({"event_type": "transactions", "event_id": "t1"}).encode()
    bronze.commit([s1, s2, s1, twelve, b"\xff\xfe not utf-8", txn])
    bronze.commit([_sale(3, "Gadget", 65, "7.00"), s2])

    assert (
        run_until_done(sales.start(spark, settings, bronze=_spark_delta(spark, bronze)), job, name="sales")
        == 0
    )
    # A restart resumes after the files it has read: only the new commit is processed.
    bronze.commit([_sale(4, "Widget", 45, "1.00")])
    assert (
        run_until_done(sales.start(spark, settings, bronze=_spark_delta(spark, bronze)), job, name="sales")
        == 0
    )

    assert sorted((r["sales_id"], r["product_name"], r["sales_amount"]) for r in _read(settings.silver)) == [
        (1, "Widget", Decimal("10.50")),
        (2, "Widget", Decimal("2.25")),
        (3, "Gadget", Decimal("7.00")),
        (4, "Widget", Decimal("1.00")),
    ]
    assert sorted((r["sequence_number"], r["reason"]) for r in _read(settings.quarantine)) == [
        ("3", "field SalesAmount: expected decimal(12,2), found 'twelve'"),
        ("4", "payload is not valid UTF-8"),
    ]
    gold = sorted((r["product_name"], r["minute"], r["revenue"], r["sales"]) for r in _read(settings.gold))
    assert gold == [
        ("Gadget", datetime(2026, 1, 2, 3, 5, tzinfo=UTC), Decimal("7.00"), 1),
        ("Widget", datetime(2026, 1, 2, 3, 4, tzinfo=UTC), Decimal("13.75"), 3),
    ]
    counts = [
        (
            m["batch_id"],
            m["bronze_rows"],
            m["silver_rows"],
            m["quarantined"],
            m["duplicates_removed"],
            m["other_types"],
        )
        for m in sales.read_metrics(settings)
    ]
    assert counts == [(0, 6, 2, 2, 1, 1), (1, 2, 1, 0, 1, 0), (2, 1, 1, 0, 0, 0)]
    lines = [
        json.loads(x) for p in sorted(Path(tmp_path / "json").rglob("*.json")) for x in p.read_text().split()
    ]
    assert sorted(r["event_id"] for r in lines) == ["e1", "e2", "e3", "e4"]


def _txn(tid: str, account: str, amount: float, at_s: float) -> bytes:
    return json.dumps(
        {
            "event_type": "transactions",
            "event_id": f"e-{tid}",
            "event_time": _time(at_s),
            "transaction_id": tid,
            "account_id": account,
            "amount": amount,
            "txn_time": _time(at_s),
        }
    ).encode()


def _fraud_run(spark, settings, bronze, commits):
    query = fraud.start(spark, settings, bronze=_spark_delta(spark, bronze))
    try:
        for payloads in commits:
            bronze.commit(payloads)
            query.processAllAvailable()
    finally:
        query.stop()
    return query


@synapse_line_only
def test_fraud_state_on_rocksdb_alerts_once_and_flags_late_rows_across_a_restart(spark, tmp_path):
    bronze = Bronze(str(tmp_path / "bronze"))
    job = JobSettings(
        source_table=bronze.uri, lake=str(tmp_path / "lake"), checkpoint=str(tmp_path / "checkpoint")
    )
    settings = fraud.FraudSettings(job=job, watermark_seconds=120)

    # Batch 0: A's small; B's large before its small (arrival order); junk. Batch 1: A's large 50 s after its
    # small, B's small 30 s before its large, C at 600 s (the watermark moves to 480 s).
    _fraud_run(
        spark,
        settings,
        bronze,
        [
            [_txn("a-s", "A", 0.42, 0), _txn("b-l", "B", 777.0, 40), b"{not json"],
            [_txn("a-l", "A", 612.5, 50), _txn("b-s", "B", 0.05, 10), _txn("c-o", "C", 20.0, 600)],
        ],
    )
    # Restart (state and watermark from the checkpoint). Batch 2: D's pattern at 100/130 s is behind 480 s.
    query = _fraud_run(spark, settings, bronze, [[_txn("d-s", "D", 0.30, 100), _txn("d-l", "D", 900.0, 130)]])

    alerts = sorted(
        (
            r["account_id"],
            r["small_transaction_id"],
            r["large_transaction_id"],
            r["small_amount"],
            r["large_amount"],
        )
        for r in _read(job.table(fraud.ALERTS))
    )
    assert alerts == [("A", "a-s", "a-l", 0.42, 612.5), ("B", "b-s", "b-l", 0.05, 777.0)]
    txns = {r["transaction_id"]: r for r in _read(job.table(fraud.TRANSACTIONS))}
    # A batch that moves the watermark is followed by a no-data batch (Spark expires state there, before
    # processAllAvailable returns): data batches are 0, 2 and, after the restart, 4 (the watermark stays put).
    assert sorted((tid, r["late"], r["batch_id"]) for tid, r in txns.items()) == [
        ("a-l", False, 2),
        ("a-s", False, 0),
        ("b-l", False, 0),
        ("b-s", False, 2),
        ("c-o", False, 2),
        ("d-l", True, 4),
        ("d-s", True, 4),
    ]
    assert txns["d-l"]["watermark"] == T0 + timedelta(seconds=480)
    assert txns["a-l"]["fraud_score"] >= 0.5 > txns["c-o"]["fraud_score"]
    assert [(r["sequence_number"], r["reason"]) for r in _read(job.table(fraud.QUARANTINE))] == [
        ("2", "payload is not valid JSON")
    ]
    # Late rows reached the state function (Spark dropped none); state sits in the RocksDB store.
    (state,) = query.lastProgress["stateOperators"]
    assert state["numRowsDroppedByWatermark"] == 0
    assert "rocksdbSstFileSize" in state["customMetrics"]
    assert [
        (m["batch_id"], m["bronze_rows"], m["silver_rows"], m["alerts"], m["late"])
        for m in fraud.read_metrics(settings)
    ] == [
        (0, 3, 2, 0, 0),
        (1, 0, 0, 0, 0),
        (2, 3, 3, 2, 0),
        (3, 0, 0, 0, 0),
        (4, 2, 2, 0, 2),
    ]


def _order(change_id: int, op: str, order_id: str, at_s: float, amount: float, status: str) -> bytes:
    return json.dumps(
        {
            "event_type": "orders",
            "event_id": f"o{change_id}",
            "event_time": _time(at_s),
            "change_id": change_id,
            "op": op,
            "order_id": order_id,
            "order_ts": _time(at_s),
            "customer_id": f"c-{order_id}",
            "amount": amount,
            "status": status,
        }
    ).encode()


@synapse_line_only
def test_orders_cow_and_mor_on_spark_delta_rows_end_in_the_same_orders(spark, tmp_path):
    bronze = Bronze(str(tmp_path / "bronze"))
    settings = orders.OrdersSettings(
        layout="mor",
        lake=str(tmp_path / "lake"),
        source_table=bronze.uri,
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
        compact_every=2,
        max_files_per_trigger=1,
        tombstone_retention=timedelta(days=3650),
    )
    # Both layouts fed from the same micro-batches in one query (as `lakestack demo` compares them).
    job = orders.OrdersJob(settings, layouts=("cow", "mor"))
    query = job.start(spark, bronze=_spark_delta(spark, bronze))
    commits = [
        [_order(1, "insert", "A", 0, 10.0, "placed"), _order(2, "insert", "B", 1, 20.0, "placed"), b"[1, 2]"],
        # A's update, then an older change of A (precombine: the latest order_ts wins), B deleted.
        [_order(3, "update", "A", 30, 12.5, "paid"), _order(4, "update", "A", 5, 99.0, "stale")],
        [_order(5, "delete", "B", 40, 20.0, "cancelled"), _order(6, "insert", "C", 41, 7.0, "placed")],
        [json.dumps({"event_type": "sales", "event_id": "s1"}).encode()],
    ]
    try:
        for payloads in commits:
            bronze.commit(payloads)
            query.processAllAvailable()
    finally:
        query.stop()
        job.close()
    assert query.exception() is None

    expected = [
        ("A", T0 + timedelta(seconds=30), "c-A", 12.5, "paid"),
        ("C", T0 + timedelta(seconds=41), "c-C", 7.0, "placed"),
    ]
    tables = settings.tables()
    for layout in ("cow", "mor"):
        rows = orders.snapshot(None, layout, tables).to_pylist()
        assert [
            (r["order_id"], r["order_ts"], r["customer_id"], r["amount"], r["status"]) for r in rows
        ] == expected, layout
    assert [
        (r.batch_id, r.bronze_rows, r.quarantined, r.other_types, r.outcomes["cow"].changes)
        for r in job.reports
    ] == [(0, 3, 1, 0, 2), (1, 2, 0, 0, 2), (2, 2, 0, 0, 2), (3, 1, 0, 1, 0)]
    assert [(r["sequence_number"], r["reason"]) for r in _read(tables.quarantine.uri)] == [
        ("2", "payload is not a JSON object: '[1, 2]'")
    ]
