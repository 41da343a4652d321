"""The stateful detection in Spark: state across micro-batches, late rows, timeouts, RocksDB state store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.pipelines.fraud import ROCKSDB_PROVIDER, detect

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _batch(rows):
    import pyarrow as pa

    return pa.table(
        {
            "account_id": [r[0] for r in rows],
            "transaction_id": [r[1] for r in rows],
            "amount": [float(r[2]) for r in rows],
            "txn_time": pa.array([T0 + timedelta(seconds=r[3]) for r in rows], pa.timestamp("us", tz="UTC")),
            "event_id": [f"e-{r[1]}" for r in rows],
            "event_time": pa.array([T0 for _ in rows], pa.timestamp("us", tz="UTC")),
            "shard_id": ["shard-0" for _ in rows],
            "sequence_number": [str(i) for i, _ in enumerate(rows)],
        }
    )


@pytest.fixture
def stream_dir(tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    return directory


def test_state_carries_across_batches_flags_late_rows_and_expires(spark, stream_dir, tmp_path):
    import pyarrow.parquet as pq

    first = _batch([("A", "a-s", 0.50, 0), ("B", "b-o", 40.0, 5), ("C", "c-l", 900.0, 50)])
    pq.write_table(first, stream_dir / "0.parquet")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    frame = spark.readStream.schema(spark.read.parquet(str(stream_dir)).schema).parquet(str(stream_dir))
    query = (
        detect(frame, watermark_delay="60 seconds")
        .writeStream.format("memory")
        .queryName("fraud_state_test")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        query.processAllAvailable()
        # Batch 2: A's large 30 s after its small; C's small 20 s before C's large (arrives after it).
        pq.write_table(
            _batch([("A", "a-l", 700.0, 30), ("C", "c-s", 0.10, 30), ("D", "d-o", 20.0, 400)]),
            stream_dir / "1.parquet",
        )
        query.processAllAvailable()
        # Watermark is now 400 - 60 = 340 s: a transaction at 100 s is late; B's state has expired.
        pq.write_table(
            _batch([("B", "b-late", 0.20, 100), ("D", "d-l", 800.0, 420)]), stream_dir / "2.parquet"
        )
        query.processAllAvailable()
        rows = spark.table("fraud_state_test").collect()
        states = query.lastProgress["stateOperators"]
    finally:
        query.stop()

    alerts = sorted(
        (r.account_id, r.small_transaction_id, r.transaction_id) for r in rows if r.kind == "alert"
    )
    assert alerts == [("A", "a-s", "a-l"), ("C", "c-s", "c-l")]
    txns = {r.transaction_id: r for r in rows if r.kind == "txn"}
    assert sorted(txns) == ["a-l", "a-s", "b-late", "b-o", "c-l", "c-s", "d-l", "d-o"]
    assert sorted(tid for tid, r in txns.items() if r.late) == ["b-late"]
    # Features: A's large sees A's small 30 s before it.
    assert (
        txns["a-l"].seconds_since_previous,
        txns["a-l"].previous_amount,
        txns["a-l"].count_last_minute,
    ) == (
        30.0,
        0.5,
        1,
    )
    assert (txns["d-o"].seconds_since_previous, txns["d-o"].count_last_minute) == (60.0, 0)
    # Only D's window is left (it holds d-o at 400 s and d-l at 420 s); A, B, C expired by timeout.
    assert states[0]["numRowsTotal"] == 1
    assert states[0]["numRowsDroppedByWatermark"] == 0  # late rows reached the function (b-late above)
    assert "rocksdbSstFileSize" in states[0]["customMetrics"]  # the RocksDB provider holds the state
