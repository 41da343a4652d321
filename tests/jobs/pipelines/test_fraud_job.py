"""The fraud job end to end on a bronze stream: tables, exactly-once across a restart and a crash mid-batch."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from jobs.lake import DeltaRsEngine, LakeTable, LakeWriteError
from jobs.pipelines import fraud
from jobs.pipelines._job import JobSettings

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _payload(tid: str, account: str, amount: float, at_s: float) -> bytes:
    body = {
        "event_type": "transactions",
        "event_id": f"e-{tid}",
        "event_time": (T0 + timedelta(seconds=at_s)).isoformat().replace("+00:00", "Z"),
        "transaction_id": tid,
        "account_id": account,
        "amount": amount,
        "txn_time": (T0 + timedelta(seconds=at_s)).isoformat().replace("+00:00", "Z"),
    }
    return json.dumps(body).encode()


class Bronze:
    """A bronze Delta table as the ingest job writes it: each `add` is one more commit."""

    def __init__(self, uri: str) -> None:
        self.table = DeltaRsEngine().table(uri)
        self.sequence = 0
        self.commits = 0

    def add(self, payloads: list[bytes]) -> None:
        rows = len(payloads)
        now = datetime.now(UTC)
        batch = pa.table(
            {
                "data": pa.array(payloads, pa.binary()),
                "partition_key": ["k"] * rows,
                "shard_id": ["shard-0"] * rows,
                "sequence_number": [str(self.sequence + i) for i in range(rows)],
                "arrival_time": pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                "ingest_time": pa.array([now] * rows, pa.timestamp("us", tz="UTC")),
                "batch_id": pa.array([self.commits] * rows, pa.int64()),
            }
        )
        self.table.append(batch, app_id="test-ingest", batch_id=self.commits)
        self.sequence += rows
        self.commits += 1


class FailingOnce(LakeTable):
    """A table whose first append fails after nothing was written (a crash between two tables' commits)."""

    def __init__(self, table: LakeTable) -> None:
        super().__init__(table.engine, table.ref)
        self.failures_left = 1

    def append(self, data, **kwargs):
        if self.failures_left:
            self.failures_left -= 1
            raise LakeWriteError("injected: the process died before this table's commit")
        return super().append(data, **kwargs)


@pytest.fixture
def job(tmp_path):
    job = JobSettings(
        source_table=str(tmp_path / "bronze"),
        lake=str(tmp_path / "lake"),
        checkpoint=str(tmp_path / "checkpoint"),
    )
    return fraud.FraudSettings(job=job, watermark_seconds=120), Bronze(job.source_table)


def _run(spark, settings, *, tables=None):
    query = fraud.start(spark, settings, tables=tables)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return query


def _read(settings, name):
    engine = DeltaRsEngine()
    return engine.table(settings.table_uri(name)).read().to_pylist()


def test_alerts_once_across_a_restart_and_a_crash_mid_batch(spark, job):
    settings, bronze = job
    # Batch 0: A's small; B's large comes before its small (arrival order); junk is quarantined.
    sales = json.dumps({"event_type": "sales", "event_id": "x", "SalesId": 1}).encode()
    negative = _payload("neg", "E", -5.0, 1)
    bronze.add(
        [
            _payload("a-s", "A", 0.42, 0),
            _payload("b-l", "B", 777.0, 40),
            b"{not json",
            b'{"x": 1}',
            sales,
            negative,
        ]
    )
    _run(spark, settings)
    assert _read(settings, fraud.ALERTS) == []

    # Restart. Batch 1: A's large 50 s after its small; B's small 30 s before B's large; an ordinary one.
    bronze.add(
        [_payload("a-l", "A", 612.5, 50), _payload("b-s", "B", 0.05, 10), _payload("c-o", "C", 20.0, 55)]
    )
    _run(spark, settings)

    # Crash mid-batch: batch 2's transactions are committed, its alerts are not; the restart finishes it.
    bronze.add(
        [_payload("d-s", "D", 0.99, 60), _payload("d-l", "D", 500.01, 120), _payload("d-x", "D", 500.0, 121)]
    )
    default = fraud.FraudTables.under(settings)
    crashing = fraud.FraudTables(default.transactions, default.quarantine, FailingOnce(default.alerts))
    query = fraud.start(spark, settings, tables=crashing)
    with pytest.raises(Exception, match="injected"):
        query.processAllAvailable()
    query.stop()
    assert sorted(
        r["transaction_id"] for r in _read(settings, fraud.TRANSACTIONS) if r["account_id"] == "D"
    ) == [
        "d-l",
        "d-s",
        "d-x",
    ]
    assert sorted(r["account_id"] for r in _read(settings, fraud.ALERTS)) == ["A", "B"]
    _run(spark, settings)

    alerts = sorted(
        (
            r["account_id"],
            r["small_transaction_id"],
            r["large_transaction_id"],
            r["small_amount"],
            r["large_amount"],
        )
        for r in _read(settings, fraud.ALERTS)
    )
    assert alerts == [
        ("A", "a-s", "a-l", 0.42, 612.5),
        ("B", "b-s", "b-l", 0.05, 777.0),
        ("D", "d-s", "d-l", 0.99, 500.01),
    ]
    a_alert = next(r for r in _read(settings, fraud.ALERTS) if r["account_id"] == "A")
    assert (a_alert["small_txn_time"], a_alert["large_txn_time"]) == (T0, T0 + timedelta(seconds=50))
    txns = _read(settings, fraud.TRANSACTIONS)
    assert sorted(r["transaction_id"] for r in txns) == [
        "a-l",
        "a-s",
        "b-l",
        "b-s",
        "c-o",
        "d-l",
        "d-s",
        "d-x",
    ]
    assert all(0.0 <= r["fraud_score"] <= 1.0 for r in txns)
    score = {r["transaction_id"]: r["fraud_score"] for r in txns}
    assert (
        min(score["a-l"], score["b-l"]) >= 0.5 > max(score["a-s"], score["b-s"], score["c-o"], score["d-x"])
    )
    assert {r["model_version"] for r in txns} == {fraud.load_model().version}
    # Every bronze row is accounted for, batch by batch: 6 + 3 + 3 rows in, the sales event only counted.
    totals = {k: sum(m[k] for m in fraud.read_metrics(settings)) for k in ("bronze_rows", "silver_rows")}
    totals.update(
        {k: sum(m[k] for m in fraud.read_metrics(settings)) for k in ("quarantined", "other_types", "alerts")}
    )
    assert totals == {"bronze_rows": 12, "silver_rows": 8, "quarantined": 3, "other_types": 1, "alerts": 3}
    quarantined = sorted((r["sequence_number"], r["reason"]) for r in _read(settings, fraud.QUARANTINE))
    assert quarantined == [
        ("2", "payload is not valid JSON"),
        ("3", "event_type is missing"),
        ("5", "field amount: expected a positive, finite amount, found '-5.0'"),
    ]


def test_late_transactions_are_written_flagged_and_not_judged(spark, job):
    settings, bronze = job
    bronze.add([_payload("o1", "A", 30.0, 0), _payload("o2", "B", 30.0, 600), _payload("c1", "C", 30.0, 10)])
    _run(spark, settings)
    # Watermark after batch 0: 600 s - 2 min = 480 s. A's pattern at 100 s / 130 s arrives too late.
    bronze.add(
        [
            _payload("late-s", "A", 0.30, 100),
            _payload("late-l", "A", 900.0, 130),
            _payload("ok", "B", 1.0, 590),
        ]
    )
    query = _run(spark, settings)
    (state,) = query.lastProgress["stateOperators"]
    txns = {r["transaction_id"]: r for r in _read(settings, fraud.TRANSACTIONS)}
    assert sorted(tid for tid, r in txns.items() if r["late"]) == ["late-l", "late-s"]
    assert txns["ok"]["late"] is False
    assert txns["late-l"]["watermark"] == T0 + timedelta(seconds=480)
    assert _read(settings, fraud.ALERTS) == []
    # The late rows reached the state function (Spark dropped none). A's window (o1 at 0 s) expired with its
    # batch, C's (no new rows) by its event-time timeout: only B's is left, in the RocksDB state store.
    assert state["numRowsDroppedByWatermark"] == 0
    assert state["numRowsTotal"] == 1
    assert "rocksdbSstFileSize" in state["customMetrics"]
    features = {k: txns["ok"][k] for k in ("seconds_since_previous", "previous_amount", "count_last_minute")}
    assert features == {"seconds_since_previous": 60.0, "previous_amount": 0.0, "count_last_minute": 0}
    assert (txns["o2"]["seconds_since_previous"], txns["o2"]["count_last_minute"]) == (60.0, 0)


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from jobs.lake import LakeTable
    from jobs.pipelines import fraud
    from jobs.pipelines._job import JobSettings
    from jobs.session import build_session

    bronze, lake, checkpoint, marker = sys.argv[1:5]
    append = LakeTable.append

    def stalling(self, data, **kwargs):
        # Batch 1: its transactions commit lands, then the batch stalls (before its alerts) until killed.
        result = append(self, data, **kwargs)
        if kwargs.get("batch_id") == 1 and self.uri.rstrip("/").endswith("/" + fraud.TRANSACTIONS):
            Path(marker).write_text("batch 1 half-written")
            time.sleep(300)
        return result

    LakeTable.append = stalling
    job = JobSettings(
        source_table=bronze, lake=lake, checkpoint=checkpoint, trigger="processing-time=0.5s"
    )
    settings = fraud.FraudSettings(job=job, watermark_seconds=120, max_files_per_trigger=1)
    fraud.start(build_session("fraud-kill-child"), settings).awaitTermination(300)
    """
)


@pytest.mark.slow
def test_killed_mid_batch_then_restarted_alerts_once(spark, tmp_path, killable_child):
    bronze = Bronze(str(tmp_path / "bronze"))
    # One commit per micro-batch (max_files_per_trigger=1). Batch 1 completes A's and B's patterns.
    bronze.add([_payload("a-s", "A", 0.42, 0), _payload("b-l", "B", 777.0, 40)])
    bronze.add(
        [_payload("a-l", "A", 612.5, 50), _payload("b-s", "B", 0.05, 10), _payload("c-o", "C", 20.0, 55)]
    )
    bronze.add([_payload("d-s", "D", 0.99, 60), _payload("d-l", "D", 500.01, 120)])
    job = JobSettings(
        source_table=str(tmp_path / "bronze"),
        lake=str(tmp_path / "lake"),
        checkpoint=str(tmp_path / "checkpoint"),
    )
    marker = tmp_path / "killed-here"
    child = killable_child(_CHILD, job.source_table, job.lake, str(job.checkpoint), str(marker))
    try:
        child.wait_until(marker.exists, "reached batch 1")
    finally:
        child.kill()

    settings = fraud.FraudSettings(job=job, watermark_seconds=120, max_files_per_trigger=1)
    # Killed between batch 1's two commits: its transactions are in, its alerts are not.
    assert sorted(r["transaction_id"] for r in _read(settings, fraud.TRANSACTIONS)) == [
        "a-l",
        "a-s",
        "b-l",
        "b-s",
        "c-o",
    ]
    assert _read(settings, fraud.ALERTS) == []

    _run(spark, settings)

    alerts = sorted(
        (r["account_id"], r["small_transaction_id"], r["large_transaction_id"], r["batch_id"])
        for r in _read(settings, fraud.ALERTS)
    )
    assert alerts == [("A", "a-s", "a-l", 1), ("B", "b-s", "b-l", 1), ("D", "d-s", "d-l", 2)]
    assert sorted(r["transaction_id"] for r in _read(settings, fraud.TRANSACTIONS)) == [
        "a-l",
        "a-s",
        "b-l",
        "b-s",
        "c-o",
        "d-l",
        "d-s",
    ]
