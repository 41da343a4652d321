"""Benchmark: the Kinesis source draining a pre-filled emulator stream vs a bare GetRecords loop on the same stream.

For each master (``local[2]`` and ``local-cluster[2,1,1024]``) and each shard count (1, 2, 4), in one run: the
source (Spark's noop sink by default, so the source alone is measured) drains the backlog and a bare boto3
loop drains the same stream; prints both rates, their ratio, the CPU seconds per MB of the source's planner
(the Python process the driver runs the source's ``latestOffset`` in; records are read by the executors,
so this is meant to be near 0), and the peak PSS of the driver (its Python and its JVM) and of each executor
(its JVM and its Python workers; in ``local[2]`` the executor is the driver's JVM).

The bare loop reads every shard in a thread of its own and keeps to the per-shard read quota the source keeps
to (5 GetRecords/s and 2 MB/s per shard), so the ratio compares like with like; ``--bare-unpaced`` measures
the emulator's raw speed instead. The planner's CPU is sampled every 0.2 s (its last sample counts).

    .venv/bin/python bench/bench_kinesis_source.py                      # 100k records per stream
    .venv/bin/python bench/bench_kinesis_source.py --records 1000000    # the issue's backlog (long here)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
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
MASTERS = ("local[2]", "local-cluster[2,1,1024]")
SHARDS = (1, 2, 4)
PLANNER_MODULE = "python_streaming_source_runner"
PAYLOAD = b'{"event_id":"%08d","amount":12.34,"account":"acct-0042","kind":"sale","pad":"%s"}'
print = functools.partial(print, flush=True)


def start_emulator() -> tuple[subprocess.Popen, str]:
    from lakestack.emulator import free_port, start_server

    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="bench-moto-")) / "moto.log"
    return start_server(port, log_path=log), f"http://127.0.0.1:{port}"


def fill(client, stream: str, shards: int, records: int, record_bytes: int) -> int:
    """Create ``stream`` with ``shards`` shards holding ``records`` records; returns the payload bytes."""
    client.create_stream(StreamName=stream, ShardCount=shards)
    while (
        client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
        != "ACTIVE"
    ):
        time.sleep(0.1)
    total = 0
    for offset in range(0, records, 500):
        entries = []
        for i in range(offset, min(offset + 500, records)):
            data = PAYLOAD % (i, b"x" * max(0, record_bytes - 80))
            total += len(data)
            entries.append({"PartitionKey": f"k{i % 997}", "Data": data})
        for _ in range(10):
            reply = client.put_records(StreamName=stream, Records=entries)
            if reply["FailedRecordCount"] == 0:
                break
            entries = [e for e, r in zip(entries, reply["Records"], strict=True) if "ErrorCode" in r]
        else:
            raise SystemExit("could not pre-fill the stream")
    return total


def bare_shard(client, stream: str, shard_id: str, paced: bool) -> int:
    iterator = client.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    total, ready = 0, 0.0
    while iterator:
        if paced:
            time.sleep(max(0.0, ready - time.monotonic()))
        began = time.monotonic()
        reply = client.get_records(ShardIterator=iterator, Limit=10_000)
        nbytes = sum(len(r["Data"]) for r in reply["Records"])
        ready = began + max(0.2, nbytes / (2 * 1024 * 1024))
        total += len(reply["Records"])
        iterator = reply.get("NextShardIterator")
        if not reply["Records"] and not reply.get("MillisBehindLatest"):
            break
    return total


def bare_loop(endpoint: str, stream: str, paced: bool) -> tuple[int, float]:
    """One thread per shard, each draining its shard: (records, seconds)."""
    client = boto3.client("kinesis", region_name=REGION, endpoint_url=endpoint)
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
    counts: list[int] = []
    began = time.perf_counter()
    threads = [
        threading.Thread(target=lambda s=s: counts.append(bare_shard(client, stream, s, paced)))
        for s in shards
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts), time.perf_counter() - began


class Sampler:
    """Peak PSS per role (driver: this Python + the driver JVM; each executor: its JVM + Python workers) and
    the CPU seconds of the source's planner process(es), sampled every 0.2 s over this process's tree."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self.planner_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _role(self, proc: psutil.Process, chain: list[psutil.Process]) -> str:
        for p in chain:
            if any("CoarseGrainedExecutorBackend" in part for part in p.cmdline()):
                return f"executor {p.pid}"
        return "driver"

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            now: dict[str, int] = {}
            for proc in [me, *me.children(recursive=True)]:
                try:
                    argv = " ".join(proc.cmdline())
                    if "--bare" in argv:
                        continue
                    if PLANNER_MODULE in argv:
                        cpu = proc.cpu_times()
                        self.planner_cpu[proc.pid] = cpu.user + cpu.system
                    role = self._role(proc, [proc, *proc.parents()])
                    now[role] = now.get(role, 0) + proc.memory_full_info().pss
                except psutil.Error:
                    continue
            for role, size in now.items():
                self.peak[role] = max(self.peak.get(role, 0), size)
            self._stop.wait(0.2)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def drain(spark, stream: str, endpoint: str, workdir: Path, cap: int) -> tuple[int, float]:
    from jobs.sources import read_kinesis_stream, read_source_metrics

    checkpoint = str(workdir / f"ck-{stream}")
    began = time.perf_counter()
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
    return sum(m["records"] for m in read_source_metrics(checkpoint)), elapsed


def one_master(args: argparse.Namespace) -> None:
    """The runs of one master, in a process of its own (one Spark application per master)."""
    from jobs.session import build_session

    client = boto3.client("kinesis", region_name=REGION, endpoint_url=args.endpoint)
    spark = build_session("bench-kinesis-source", master=args.master)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = f"warm-{time.monotonic_ns()}"
        fill(client, warm, 1, 5_000, args.record_bytes)
        drain(spark, warm, args.endpoint, Path(tmp), args.max_records_per_shard)
        for shards in SHARDS:
            stream = f"bench-{shards}-{time.monotonic_ns()}"
            nbytes = fill(client, stream, shards, args.records, args.record_bytes)
            bare_n, bare_s = bare_loop(args.endpoint, stream, not args.bare_unpaced)
            with Sampler() as sampler:
                n, seconds = drain(spark, stream, args.endpoint, Path(tmp), args.max_records_per_shard)
            if n != args.records or bare_n != args.records:
                raise SystemExit(f"expected {args.records} from both, got job={n} bare={bare_n}")
            executors = {k: v for k, v in sampler.peak.items() if k.startswith("executor")}
            rows.append(
                {
                    "master": args.master,
                    "shards": shards,
                    "records": n,
                    "mb": nbytes / 1e6,
                    "job_rps": n / seconds,
                    "bare_rps": bare_n / bare_s,
                    "planner_cpu_s": sum(sampler.planner_cpu.values()),
                    "driver_pss": sampler.peak.get("driver", 0),
                    "executor_pss": sorted(executors.values(), reverse=True),
                }
            )
            print(json.dumps(rows[-1]))
    spark.stop()
    print("RESULT " + json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=100_000, help="backlog per stream (the issue: 1000000)"
    )
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--max-records-per-shard", type=int, default=10_000)
    parser.add_argument("--bare-unpaced", action="store_true", help="the bare loop ignores the read quota")
    parser.add_argument("--master", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.master:
        one_master(args)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    emulator, endpoint = start_emulator()
    rows = []
    try:
        for master in MASTERS:
            command = [sys.executable, __file__, "--master", master, "--endpoint", endpoint]
            command += ["--records", str(args.records), "--record-bytes", str(args.record_bytes)]
            command += ["--max-records-per-shard", str(args.max_records_per_shard)]
            command += ["--bare-unpaced"] if args.bare_unpaced else []
            out = subprocess.run(command, capture_output=True, text=True, timeout=7200)
            if out.returncode != 0:
                raise SystemExit(f"{master}: exit {out.returncode}\n{out.stderr[-3000:]}")
            rows += json.loads(
                next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:]
            )
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)
    paced = "unpaced" if args.bare_unpaced else "paced to 5 calls/s and 2 MB/s per shard"
    print(f"\n{args.records:,} records of ~{args.record_bytes} B per stream; noop sink; bare loop {paced}")
    print(
        "| master | shards | MB | source rec/s | bare rec/s | ratio | planner CPU s/MB | driver PSS MiB | executors PSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['master']} | {r['shards']} | {r['mb']:.1f} | {r['job_rps']:,.0f} | {r['bare_rps']:,.0f} | "
            f"{r['job_rps'] / r['bare_rps']:.2f} | {r['planner_cpu_s'] / r['mb']:.4f} | "
            f"{r['driver_pss'] / 2**20:,.0f} | {', '.join(f'{p / 2**20:,.0f}' for p in r['executor_pss']) or '-'} |"
        )


if __name__ == "__main__":
    main()
