"""Benchmark: one exactly-once micro-batch append through the kit's sink (delta-spark), against a floor.

    .venv/bin/python bench/bench_commit_cost.py                    # 30 batches per side, on the emulator's S3
    .venv/bin/python bench/bench_commit_cost.py --store local      # a table on local disk instead
    .venv/bin/python bench/bench_commit_cost.py --batches 60 --rows 1000

Sides, each writing the same cached 1,000-row bronze batch once per micro-batch to a table of its own:

- kit: ``foreach_batch_writer`` on ``JvmDeltaEngine`` (what ingest and every pipeline write with): the executors
  write the Parquet file, the driver commits with the batch's transaction, a replayed batch is skipped;
- floor: the same Parquet bytes and one small commit JSON put straight to the store (S3 ``PutObject`` with
  ``If-None-Match``, or a local write and rename): what any commit must at least cost here.

Printed per side: p50 and p95 seconds per batch (the first ``--warmup`` batches left out), then the ratio of the
kit's p50 to the floor's, and whether the issue-40 goal holds (p50 <= 0.4 s and <= 3x the floor). The kit's
table must end with every batch once (rows and the transaction version are checked; exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.ingest import bronze_schema
from jobs.lake import JvmDeltaEngine, foreach_batch_writer, scoped_storage_options
from jobs.session import build_session, stop_session
from lakestack.emulator import free_port, start_server

GOAL_P50_S = 0.4
GOAL_RATIO = 3.0


def _batch(rows: int) -> pa.Table:
    now = datetime.now(UTC)
    return pa.table(
        {
            "data": [b"x" * 200] * rows,
            "partition_key": ["k"] * rows,
            "shard_id": ["shardId-000000000000"] * rows,
            "sequence_number": [str(i) for i in range(rows)],
            "arrival_time": [now] * rows,
            "ingest_time": [now] * rows,
            "batch_id": [0] * rows,
        },
        schema=bronze_schema(),
    )


def _percentiles(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def _floor_s3(client: object, bucket: str, prefix: str, parquet: bytes, batches: int) -> list[float]:
    times = []
    for batch_id in range(batches):
        started = time.perf_counter()
        client.put_object(Bucket=bucket, Key=f"{prefix}/part-{batch_id:05d}.parquet", Body=parquet)  # type: ignore[attr-defined]
        client.put_object(  # type: ignore[attr-defined]
            Bucket=bucket,
            Key=f"{prefix}/_delta_log/{batch_id:020d}.json",
            Body=b'{"commitInfo":{}}\n{"add":{}}\n',
            IfNoneMatch="*",
        )
        times.append(time.perf_counter() - started)
    return times


def _floor_local(root: Path, parquet: bytes, batches: int) -> list[float]:
    (root / "_delta_log").mkdir(parents=True)
    times = []
    for batch_id in range(batches):
        started = time.perf_counter()
        (root / f"part-{batch_id:05d}.parquet").write_bytes(parquet)
        staged = root / "_delta_log" / f".{batch_id:020d}.json.tmp"
        staged.write_bytes(b'{"commitInfo":{}}\n{"add":{}}\n')
        os.rename(staged, root / "_delta_log" / f"{batch_id:020d}.json")
        times.append(time.perf_counter() - started)
    return times


def _kit(
    spark: Any, arrow: pa.Table, uri: str, options: dict[str, str], batches: int
) -> tuple[list[float], int, int | None]:
    """The kit's sink over ``batches`` micro-batches, then one replay: (seconds per batch, rows, txn version)."""
    frame = spark.createDataFrame(arrow).coalesce(1).cache()
    frame.count()
    table = JvmDeltaEngine(spark).table(uri, storage_options=options)
    table.create(bronze_schema())
    writer = foreach_batch_writer(table, app_id="bench")
    times = []
    for batch_id in range(batches):
        started = time.perf_counter()
        writer(frame, batch_id)
        times.append(time.perf_counter() - started)
    writer(frame, batches - 1)  # a replay: must commit nothing
    return times, table.read(columns=["batch_id"]).num_rows, table.transaction_version("bench")


def _measure(
    args: argparse.Namespace, root: Path, arrow: pa.Table
) -> tuple[list[float], list[float], int, int | None]:
    sink = io.BytesIO()
    pq.write_table(arrow, sink)
    parquet = sink.getvalue()
    server = None
    if args.store == "s3":
        import boto3

        port = free_port()
        server = start_server(port, log_path=root / "moto.log")
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="bench")
    spark = build_session("bench-commit-cost")
    try:
        if args.store == "s3":
            uri = "s3://bench/kit"
            options = scoped_storage_options(uri, endpoint_url=endpoint, region="us-east-1")
            kit, rows, done = _kit(spark, arrow, uri, options, args.batches)
            floor = _floor_s3(client, "bench", "floor", parquet, args.batches)
        else:
            kit, rows, done = _kit(spark, arrow, str(root / "kit"), {}, args.batches)
            floor = _floor_local(root / "floor", parquet, args.batches)
    finally:
        stop_session(spark)
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    return kit, floor, rows, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("s3", "local"), default="s3")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1_000)
    parser.add_argument("--warmup", type=int, default=3, help="first batches left out of the percentiles")
    args = parser.parse_args()
    if args.batches <= args.warmup:
        parser.error("--batches must be larger than --warmup")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as scratch:
        kit, floor, rows, done = _measure(args, Path(scratch), _batch(args.rows))

    import pyspark

    kit_p50, kit_p95 = _percentiles(kit[args.warmup :])
    floor_p50, floor_p95 = _percentiles(floor[args.warmup :])
    ratio = kit_p50 / floor_p50
    print(f"pyspark {pyspark.__version__}; store {args.store}; {args.rows} rows x {args.batches} batches")
    print(f"kit   (delta-spark sink): p50 {kit_p50:.3f} s  p95 {kit_p95:.3f} s")
    print(f"floor (parquet + commit): p50 {floor_p50:.3f} s  p95 {floor_p95:.3f} s")
    goal = kit_p50 <= GOAL_P50_S and ratio <= GOAL_RATIO
    print(
        f"ratio kit/floor (p50): {ratio:.1f}x; goal p50 <= {GOAL_P50_S} s and <= {GOAL_RATIO:.0f}x: "
        + ("met" if goal else "not met")
    )
    expected_rows = args.rows * args.batches
    if rows != expected_rows or done != args.batches - 1:
        print(f"FAIL: the kit's table holds {rows} rows (expected {expected_rows}), txn version {done}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
