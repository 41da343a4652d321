"""Benchmark: the Kinesis source draining a pre-filled emulator stream vs a bare boto3 GetRecords loop.

Both drain the same stream (4 shards) in the same run, several repetitions each; prints medians, the ratio
(target >= 0.7) and the job's peak RSS summed over its process tree (driver Python + JVM + Python workers;
the emulator runs in its own process and is not counted). By default the job is the ingest job writing a
bronze Delta table on the emulator's S3; `--sink noop` writes to Spark's noop sink to isolate the source.

    .venv/bin/python bench/bench_kinesis_source.py                   # 200k records, ~3 minutes
    .venv/bin/python bench/bench_kinesis_source.py --records 1000000 # full size (memory target < 2.5 GB)
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("AWS_ACCESS_KEY_ID", "lakestack-local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "lakestack-local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3
import psutil

REGION = "us-east-1"
LAKE_BUCKET = "bench-lake"
print = functools.partial(print, flush=True)


def start_emulator() -> tuple[subprocess.Popen, str]:
    # The kit's own emulator process (moto with safe, O(1) shard writes), so pre-filling 1M records is fast.
    from lakestack.emulator import free_port, start_server

    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="bench-moto-")) / "moto.log"
    return start_server(port, log_path=log), f"http://127.0.0.1:{port}"


def fill(client, stream: str, records: int) -> None:
    client.create_stream(StreamName=stream, ShardCount=4)
    payload = b'{"event_id":"%08d","amount":12.34,"account":"acct-0042","kind":"sale","pad":"xxxxxxxxxx"}'
    for offset in range(0, records, 500):
        entries = [
            {"PartitionKey": f"k{i % 997}", "Data": payload % i}
            for i in range(offset, min(offset + 500, records))
        ]
        for _ in range(10):
            reply = client.put_records(StreamName=stream, Records=entries)
            if reply["FailedRecordCount"] == 0:
                break
            entries = [e for e, r in zip(entries, reply["Records"], strict=True) if "ErrorCode" in r]
        else:
            raise SystemExit("could not pre-fill the stream")


def bare_loop(client, stream: str) -> int:
    total = 0
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            reply = client.get_records(ShardIterator=iterator, Limit=10_000)
            total += len(reply["Records"])
            iterator = reply.get("NextShardIterator")
            if not reply["Records"] and not reply.get("MillisBehindLatest"):
                break
    return total


class PeakRss:
    """Samples RSS summed over this process and its descendants, the emulator excluded."""

    def __init__(self, exclude: int) -> None:
        self.exclude, self.peak, self._stop = exclude, 0, threading.Event()
        self.breakdown: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total, parts = 0, {}
            for proc in [me, *me.children(recursive=True)]:
                try:
                    if proc.pid == self.exclude or self.exclude in {p.pid for p in proc.parents()}:
                        continue
                    rss = proc.memory_info().rss
                    kind = "jvm" if proc.name() == "java" else "python"
                    parts[kind] = parts.get(kind, 0) + rss
                    total += rss
                except psutil.Error:
                    continue
            if total > self.peak:
                self.peak, self.breakdown = total, parts
            self._stop.wait(0.2)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_job(spark, stream: str, endpoint: str, *, cap: int, workdir: Path, sink: str) -> tuple[int, float]:
    from jobs.sources import read_kinesis_stream, read_source_metrics

    run_id = time.monotonic_ns()
    checkpoint = str(workdir / f"ck-{run_id}")
    began = time.perf_counter()
    if sink == "lake":
        # The real ingest job: source -> bronze Delta table through the lake layer (delta-rs).
        from jobs import ingest

        settings = ingest.IngestSettings(
            stream=stream,
            region=REGION,
            # On the emulator's S3: the ingest job applies its endpoint to the table as well as the stream.
            table=f"s3://{LAKE_BUCKET}/bronze-{run_id}",
            checkpoint=checkpoint,
            endpoint_url=endpoint,
            trigger="processing-time=0s",
            max_records_per_shard=cap,
        )
        query = ingest.start(spark, settings)
    else:
        df = read_kinesis_stream(
            spark,
            stream_name=stream,
            region=REGION,
            checkpoint_location=checkpoint,
            endpoint_url=endpoint,
            max_records_per_shard=cap,
        )
        query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    elapsed = time.perf_counter() - began
    rows = sum(m["records"] for m in read_source_metrics(checkpoint))
    return rows, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--max-records-per-shard", type=int, default=10_000)
    parser.add_argument(
        "--sink",
        choices=("noop", "lake"),
        default="lake",
        help="lake (default): the ingest job into a bronze Delta table; noop: Spark's noop sink (the source alone)",
    )
    args = parser.parse_args()

    emulator, endpoint = start_emulator()
    try:
        client = boto3.client("kinesis", region_name=REGION, endpoint_url=endpoint)
        stream = "bench-kinesis-source"
        began = time.perf_counter()
        fill(client, stream, args.records)
        print(f"pre-filled {args.records} records in {time.perf_counter() - began:.1f} s")

        if args.sink == "lake":
            boto3.client("s3", region_name=REGION, endpoint_url=endpoint).create_bucket(Bucket=LAKE_BUCKET)
        from jobs.session import build_session

        spark = build_session("bench-kinesis-source")
        bare, job = [], []
        with tempfile.TemporaryDirectory() as tmp, PeakRss(exclude=emulator.pid) as rss:
            # Warm-up on a small stream of its own: JVM code paths and Python workers, not timed.
            fill(client, "bench-warm-up", 20_000)
            run_job(
                spark,
                "bench-warm-up",
                endpoint,
                cap=args.max_records_per_shard,
                workdir=Path(tmp),
                sink=args.sink,
            )
            for rep in range(args.repetitions):
                t0 = time.perf_counter()
                n = bare_loop(client, stream)
                bare.append(n / (time.perf_counter() - t0))
                rows, elapsed = run_job(
                    spark, stream, endpoint, cap=args.max_records_per_shard, workdir=Path(tmp), sink=args.sink
                )
                job.append(rows / elapsed)
                print(
                    f"rep {rep}: bare {n} rows {bare[-1]:,.0f} rows/s | job {rows} rows {job[-1]:,.0f} rows/s"
                )
                if n != args.records or rows != args.records:
                    raise SystemExit(f"expected {args.records} rows from both, got bare={n} job={rows}")
        spark.stop()
        ratio = statistics.median(job) / statistics.median(bare)
        print(f"bare boto3 GetRecords loop: median {statistics.median(bare):,.0f} rows/s")
        print(f"kinesis source -> {args.sink} sink: median {statistics.median(job):,.0f} rows/s")
        print(f"ratio job/bare: {ratio:.2f} (target >= 0.70) {'OK' if ratio >= 0.7 else 'BELOW TARGET'}")
        print(
            f"peak RSS of the job's process tree (max-records-per-shard {args.max_records_per_shard}, "
            f"{args.records} records): {rss.peak / 2**30:.2f} GiB (target < 2.5 GB at 1M records); at the peak: "
            + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in sorted(rss.breakdown.items()))
        )
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)


if __name__ == "__main__":
    main()
