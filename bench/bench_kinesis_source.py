"""Benchmark: the Kinesis source draining a pre-filled emulator stream vs a bare boto3 GetRecords loop.

Both drain the same stream (4 shards) in the same run, several repetitions each; prints medians, the ratio
(target >= 0.9), the peak memory of the job's process tree (driver Python + JVM + Spark's Python workers
and the source's planner; as PSS, shared pages counted once, and as RSS summed; the emulator and the bare loop run in processes of their own and are not counted)
with its breakdown at the peak and the JVM's max heap, and the load average at the start, after each
repetition and at the end. The memory target (< 1.5 GB) is for a 1,000,000-record backlog. By default the job is the ingest job writing a
bronze Delta table on the emulator's S3; `--sink noop` writes to Spark's noop sink to isolate the source.

    .venv/bin/python bench/bench_kinesis_source.py                     # 200k records, ~3 minutes
    .venv/bin/python bench/bench_kinesis_source.py --records 1000000   # the target's backlog, ~15 minutes
    .venv/bin/python bench/bench_kinesis_source.py --spark-conf spark.driver.memory=768m  # try another heap
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import PeakRss, Role, load_average, load_average_line

os.environ.setdefault("AWS_ACCESS_KEY_ID", "lakestack-local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "lakestack-local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3
import psutil

REGION = "us-east-1"
LAKE_BUCKET = "bench-lake"
TARGET_RATIO = 0.9
TARGET_PEAK_BYTES = 1_500_000_000  # 1.5 GB (1.40 GiB)
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


BARE_LOOP_FLAG = "--bare-loop"


def bare_loop_in_child(endpoint: str, stream: str) -> tuple[int, float]:
    """(records, seconds) of :func:`bare_loop` run in a process of its own, timed inside it (start-up excluded).

    Its own process, so the baseline's memory (botocore's parsed replies) is not charged to the job's tree.
    """
    out = subprocess.run(
        [sys.executable, __file__, BARE_LOOP_FLAG, endpoint, stream],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    ).stdout
    records, seconds = json.loads(out.strip().splitlines()[-1])
    return int(records), float(seconds)


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


def job_role(exclude: int) -> Role:
    """The role of a process in the job's tree, for :class:`bench._common.PeakRss`; ``exclude`` (the emulator) and
    its children, and the bare loop's process, are not the job's.

    RSS summed over processes counts every shared page once per process that maps it: the shared libraries
    (libarrow, libpython, the JDK's) and the pages a forked Python worker still shares with its daemon. PSS
    (proportional set size, from ``/proc/<pid>/smaps_rollup``) divides each shared page among the processes that
    map it, so its sum is the memory the tree really holds; the target is judged on it, and both are printed.

    The breakdown at the peak: ``driver`` (this Python process: the driver, foreachBatch and delta-rs), ``jvm``
    (Spark's JVM) and ``python workers`` (Spark's Python daemons and workers, and the source's planner).
    """

    def role(proc: psutil.Process, me: psutil.Process) -> str | None:
        if proc.pid == exclude or exclude in {p.pid for p in proc.parents()}:
            return None
        argv = proc.cmdline()
        if BARE_LOOP_FLAG in argv:
            return None
        parent = proc.parent()
        if parent is not None and parent.name() == "java" and argv == parent.cmdline():
            # The JVM spawning a Python worker: until the child execs it shares the JVM's memory (vfork) and
            # its RSS is the JVM's (its name is the spawning thread's), so counting it would count the JVM
            # twice.
            return None
        if proc.pid == me.pid:
            return "driver"
        if proc.name() == "java":
            return "jvm"
        # "python -m pyspark.daemon pyspark.worker" and its forks; the source's planner runs a module too.
        module = argv[argv.index("-m") + 1 :] if "-m" in argv else argv[-1:]
        return " ".join(module)

    return role


def job_kind(role: str) -> str:
    return role if role in ("driver", "jvm") else "python workers"


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


def jvm_max_heap(spark) -> int:
    """The driver JVM's maximum heap in bytes, as the JVM itself reports it (what -Xmx came to)."""
    return int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="backlog to drain (the target: 1000000)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--max-records-per-shard", type=int, default=10_000)
    parser.add_argument(
        "--sink",
        choices=("noop", "lake"),
        default="lake",
        help="lake (default): the ingest job into a bronze Delta table; noop: Spark's noop sink (the source alone)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration over the local defaults, e.g. spark.driver.memory=768m (repeatable)",
    )
    args = parser.parse_args()
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    # timeout(1) and kill send SIGTERM: leave through the finally blocks, so the emulator is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    print(load_average_line("at the start"))
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

        spark = build_session("bench-kinesis-source", conf=conf)
        max_heap = jvm_max_heap(spark)
        bare, job = [], []
        with (
            tempfile.TemporaryDirectory() as tmp,
            PeakRss(role=job_role(emulator.pid), kind=job_kind, pss=True) as rss,
        ):
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
                n, seconds = bare_loop_in_child(endpoint, stream)
                bare.append(n / seconds)
                rows, elapsed = run_job(
                    spark, stream, endpoint, cap=args.max_records_per_shard, workdir=Path(tmp), sink=args.sink
                )
                job.append(rows / elapsed)
                print(
                    f"rep {rep}: bare {n} rows {bare[-1]:,.0f} rows/s | job {rows} rows {job[-1]:,.0f} rows/s "
                    f"| peak RSS so far {rss.peak / 2**30:.2f} GiB | load average {load_average()}"
                )
                if n != args.records or rows != args.records:
                    raise SystemExit(f"expected {args.records} rows from both, got bare={n} job={rows}")
        spark.stop()
        ratio = statistics.median(job) / statistics.median(bare)
        print(
            f"\n{args.records:,} records, 4 shards, {args.repetitions} repetitions, sink {args.sink}, "
            f"max-records-per-shard {args.max_records_per_shard}"
        )
        print(f"bare boto3 GetRecords loop: median {statistics.median(bare):,.0f} rows/s")
        print(f"kinesis source -> {args.sink} sink: median {statistics.median(job):,.0f} rows/s")
        print(
            f"ratio job/bare: {ratio:.2f} (target >= {TARGET_RATIO}) "
            f"{'MET' if ratio >= TARGET_RATIO else 'NOT MET'}"
        )
        print(
            f"peak memory of the job's process tree (PSS: shared pages counted once): {rss.peak_pss / 2**30:.2f} GiB"
            f" = {rss.peak_pss / 1e9:.2f} GB (target < {TARGET_PEAK_BYTES / 1e9:.1f} GB at 1,000,000 records) "
            f"{'MET' if rss.peak_pss < TARGET_PEAK_BYTES else 'NOT MET'}"
            + ("" if args.records >= 1_000_000 else " (backlog below the target's 1,000,000)")
        )
        print(
            f"peak RSS summed over the tree (shared libraries and fork-shared pages counted in every process): "
            f"{rss.peak / 2**30:.2f} GiB = {rss.peak / 1e9:.2f} GB"
        )
        print(
            "  RSS at the peak: "
            + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in sorted(rss.breakdown.items()))
            + f"; JVM max heap {max_heap / 2**30:.2f} GiB"
        )
        for role, (count, size) in sorted(rss.roles.items(), key=lambda item: -item[1][1]):
            print(f"    {size / 2**20:7,.0f} MiB in {count} x {role}")
        print(load_average_line("at the end"))
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)


def bare_loop_main(endpoint: str, stream: str) -> None:
    client = boto3.client("kinesis", region_name=REGION, endpoint_url=endpoint)
    began = time.perf_counter()
    records = bare_loop(client, stream)
    print(json.dumps([records, time.perf_counter() - began]))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == BARE_LOOP_FLAG:
        bare_loop_main(sys.argv[2], sys.argv[3])
    else:
        main()
