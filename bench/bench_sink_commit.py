"""Benchmark: the sink's per-batch Delta cost on the emulator's S3: the engine vs delta-rs asked directly.

    .venv/bin/python bench/bench_sink_commit.py                       # 3 repetitions x 40 batches per side
    .venv/bin/python bench/bench_sink_commit.py --batches 100 --repetitions 5

Per micro-batch the exactly-once sink looks up its transaction (to skip a replayed batch before moving it into
Arrow) and appends in one commit carrying the transaction, which looks it up again at the latest version.

- baseline: a kept delta-rs handle, caught up and asked ``transaction_version`` both times, then
  ``write_deltalake`` (what the engine did before it remembered transactions: delta-rs 1.x reads every commit
  file since the last log checkpoint for each lookup);
- engine: ``DeltaRsEngine().table(uri)``: ``transaction_version`` then ``append``, as ``foreach_batch_writer``.

Both sides write the same 1,000-row bronze batch to their own table on one emulator (its request log counts
the S3 requests), sides alternating per repetition. Printed per side: the median seconds per batch over the
repetitions (each repetition's mean), S3 requests per batch, and the ratio engine / baseline. Each side's
table must end holding every batch once (rows and the transaction version are checked; exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from jobs.ingest import bronze_schema
from jobs.lake import DeltaRsEngine, scoped_storage_options
from jobs.lake._deltars import _commit_properties
from lakestack.emulator import free_port

ROWS = 1_000


def _batch() -> pa.Table:
    now = datetime.now(UTC)
    return pa.table(
        {
            "data": [b"x" * 200] * ROWS,
            "partition_key": ["k"] * ROWS,
            "shard_id": ["shardId-000000000000"] * ROWS,
            "sequence_number": [str(i) for i in range(ROWS)],
            "arrival_time": [now] * ROWS,
            "ingest_time": [now] * ROWS,
            "batch_id": [0] * ROWS,
        },
        schema=bronze_schema(),
    )


def _behind(done: int | None, batch_id: int) -> bool:
    """Whether a table whose app transaction is ``done`` still needs ``batch_id`` (None: nothing recorded)."""
    return done is None or done < batch_id


def _requests(log: Path, since: int) -> int:
    time.sleep(0.2)  # the server logs a request after replying
    return sum(1 for line in log.read_bytes()[since:].splitlines() if b'"' in line)


def _run_side(
    side: str, uri: str, *, endpoint: str, log: Path, batch: pa.Table, batches: int
) -> tuple[float, float, str | None]:
    """One side's batches: (seconds per batch, S3 requests per batch, what is wrong with its table or None)."""
    options = scoped_storage_options(uri, endpoint_url=endpoint, region="us-east-1")
    engine = DeltaRsEngine()
    engine.table(uri, storage_options=options).create(bronze_schema())
    kept = DeltaTable(uri, storage_options=options)
    since = log.stat().st_size
    started = time.perf_counter()
    for batch_id in range(batches):
        if side == "engine":
            table = engine.table(uri, storage_options=options)
            if _behind(table.transaction_version("bench"), batch_id):
                table.append(batch, app_id="bench", batch_id=batch_id)
            continue
        kept.update_incremental()
        if _behind(kept.transaction_version("bench"), batch_id):
            kept.update_incremental()
            if _behind(kept.transaction_version("bench"), batch_id):
                write_deltalake(
                    kept, batch, mode="append", commit_properties=_commit_properties("bench", batch_id)
                )
    spent = (time.perf_counter() - started) / batches
    asked = _requests(log, since) / batches
    check = DeltaTable(uri, storage_options=options)
    landed, done = check.to_pyarrow_dataset().count_rows(), check.transaction_version("bench")
    failure = (
        None if landed == ROWS * batches and done == batches - 1 else f"{landed} rows, transaction {done}"
    )
    return spent, asked, failure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="micro-batches per side and repetition")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    scratch = Path(tempfile.mkdtemp(prefix="bench-sink-commit-"))
    log = scratch / "emulator.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "lakestack.emulator.server", "-p", str(port), "--log-requests"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
        batch = _batch()
        seconds: dict[str, list[float]] = {"baseline": [], "engine": []}
        requests: dict[str, list[float]] = {"baseline": [], "engine": []}
        failures: list[str] = []
        for rep in range(args.repetitions):
            for side in ("baseline", "engine"):
                spent, asked, failure = _run_side(
                    side,
                    f"s3://bench/{side}-{rep}",
                    endpoint=endpoint,
                    log=log,
                    batch=batch,
                    batches=args.batches,
                )
                seconds[side].append(spent)
                requests[side].append(asked)
                if failure:
                    failures.append(f"{side} rep {rep}: {failure}")
                print(
                    f"rep {rep} {side:8}  {seconds[side][-1] * 1000:7.1f} ms/batch  "
                    f"{requests[side][-1]:5.1f} S3 requests/batch",
                    flush=True,
                )
        base, ours = statistics.median(seconds["baseline"]), statistics.median(seconds["engine"])
        print(
            f"median over {args.repetitions} x {args.batches} batches: baseline {base * 1000:.1f} ms/batch "
            f"({statistics.median(requests['baseline']):.1f} requests), engine {ours * 1000:.1f} ms/batch "
            f"({statistics.median(requests['engine']):.1f} requests); ratio engine/baseline {ours / base:.2f}; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        if failures:
            print("FAILED: a table does not hold every batch once: " + "; ".join(failures), file=sys.stderr)
            return 1
        return 0
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
