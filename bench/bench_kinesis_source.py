"""Benchmark: the Kinesis source draining a pre-filled emulator stream vs a bare GetRecords loop on the same stream.

For each master (``local[2]`` and ``local-cluster[2,1,1024]``) and each shard count (1, 2, 4), in one run: the
source (Spark's noop sink by default, so the source alone is measured) drains the backlog and a bare boto3
loop drains the same stream; prints both rates, their ratio, the CPU seconds per MB of the source's planner
(the Python process the driver runs the source's ``latestOffset`` in; records are read by the executors,
so this is meant to be near 0), and the peak PSS of the driver (its Python and its JVM) and of each executor
(its JVM and its Python workers; in ``local[2]`` the executor is the driver's JVM).

The bare loop reads every shard in a thread of its own and keeps to the per-shard read quota the source keeps
to (5 GetRecords/s and 2 MB/s per shard), so the ratio compares like with like; ``--bare-unpaced`` measures
the emulator's raw speed instead. Each stream is filled once and drained by both masters (reads do not
consume it). Memory and the planner's CPU are sampled every 0.2 s by bench/_common.py's PeakRss (a
process's last sample counts for its CPU).

    .venv/bin/python bench/bench_kinesis_source.py                      # 100k records per stream
    .venv/bin/python bench/bench_kinesis_source.py --records 1000000    # the issue's backlog (long here)
    .venv/bin/python bench/bench_kinesis_source.py --records 200000 --records-for 1=1000000
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

from bench._common import PeakRss, load_average_line

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


def role(process: psutil.Process, _me: psutil.Process) -> str:
    """``planner`` (the source's Python process on the driver host), ``executor <pid>`` (an executor JVM and its
    Python workers) or ``driver`` (this Python and the driver JVM; in local[2] its Python workers too)."""
    if PLANNER_MODULE in " ".join(process.cmdline()):
        return "planner"
    for p in [process, *process.parents()]:
        if any("CoarseGrainedExecutorBackend" in part for part in p.cmdline()):
            return f"executor {p.pid}"
    return "driver"


def kind(role_name: str) -> str:
    # The planner runs on the driver's host, for the driver: its memory is the driver's.
    return "driver" if role_name == "planner" else role_name


def drain(
    spark, stream: str, endpoint: str, workdir: Path, cap: int, *, sampler: PeakRss | None = None
) -> dict:
    """Drain ``stream`` with the source: records, seconds, batches, and (with ``sampler``) the planner's CPU
    seconds when the first batch was planned (its start-up: imports, first listing) and at the end."""
    from jobs.sources import read_kinesis_stream, read_source_metrics

    checkpoint = workdir / f"ck-{stream}"
    began = time.perf_counter()
    df = read_kinesis_stream(
        spark,
        stream_name=stream,
        region=REGION,
        checkpoint_location=str(checkpoint),
        endpoint_url=endpoint,
        max_records_per_shard=cap,
        batches_to_retain=100_000,  # every batch's metrics kept: their records are the drain's count
    )
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    startup_cpu = None
    try:
        if sampler is not None:
            metrics = checkpoint / "sources" / "kinesis" / "metrics"
            while query.isActive and not (metrics.is_dir() and any(metrics.iterdir())):
                time.sleep(0.05)
            time.sleep(0.25)  # one more sample of the planner
            startup_cpu = sampler.cpu_seconds.get("planner", 0.0)
        query.processAllAvailable()
    finally:
        query.stop()
    elapsed = time.perf_counter() - began
    found = read_source_metrics(str(checkpoint))
    return {
        "records": sum(m["records"] for m in found),
        "seconds": elapsed,
        "batches": sum(1 for m in found if m["records"]),
        "planner_startup_cpu_s": startup_cpu,
        "planner_cpu_s": sampler.cpu_seconds.get("planner", 0.0) if sampler is not None else None,
    }


def one_master(args: argparse.Namespace) -> None:
    """The runs of one master, in a process of its own (one Spark application per master), over the streams
    the parent filled."""
    from jobs.session import build_session

    streams = json.loads(args.streams)
    spark = build_session("bench-kinesis-source", master=args.master)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        drain(spark, streams["warm"]["name"], args.endpoint, Path(tmp), args.max_records_per_shard)
        for shards in SHARDS:
            stream = streams[str(shards)]
            bare_n, bare_s = bare_loop(args.endpoint, stream["name"], not args.bare_unpaced)
            with PeakRss(role=role, kind=kind, pss=True, cpu=True) as sampler:
                run = drain(
                    spark,
                    stream["name"],
                    args.endpoint,
                    Path(tmp),
                    args.max_records_per_shard,
                    sampler=sampler,
                )
            n, seconds = run["records"], run["seconds"]
            if n != stream["records"] or bare_n != stream["records"]:
                raise SystemExit(f"expected {stream['records']} from both, got job={n} bare={bare_n}")
            executors = {k: v for k, v in sampler.peaks_pss.items() if k.startswith("executor")}
            rows.append(
                {
                    "master": args.master,
                    "shards": shards,
                    "records": n,
                    "mb": stream["bytes"] / 1e6,
                    "seconds": seconds,
                    "job_rps": n / seconds,
                    "bare_rps": bare_n / bare_s,
                    "batches": run["batches"],
                    "planner_startup_cpu_s": run["planner_startup_cpu_s"],
                    # The last samples: the planner's process may end with the query.
                    "planner_cpu_s": sampler.cpu_seconds.get("planner", 0.0),
                    "driver_pss": sampler.peaks_pss.get("driver", 0),
                    "executor_pss": sorted(executors.values(), reverse=True),
                }
            )
            print(json.dumps(rows[-1]))
    spark.stop()
    print("RESULT " + json.dumps(rows))


def records_for(args: argparse.Namespace) -> dict[int, int]:
    """The backlog of each shard count: ``--records``, unless ``--records-for SHARDS=N`` says otherwise."""
    found = dict.fromkeys(SHARDS, args.records)
    for spec in args.records_for:
        shards, _, count = spec.partition("=")
        if not (shards.isdigit() and int(shards) in SHARDS and count.isdigit()):
            raise SystemExit(f"--records-for: expected SHARDS=N with SHARDS one of {SHARDS}, found {spec!r}")
        found[int(shards)] = int(count)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=100_000, help="backlog per stream (the issue: 1000000)"
    )
    parser.add_argument(
        "--records-for",
        action="append",
        default=[],
        metavar="SHARDS=N",
        help="another backlog at SHARDS shards",
    )
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--max-records-per-shard", type=int, default=10_000)
    parser.add_argument("--bare-unpaced", action="store_true", help="the bare loop ignores the read quota")
    parser.add_argument("--master", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--streams", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.master:
        one_master(args)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backlogs = records_for(args)
    emulator, endpoint = start_emulator()
    rows = []
    try:
        client = boto3.client("kinesis", region_name=REGION, endpoint_url=endpoint)
        streams: dict[str, dict[str, object]] = {}
        for key, shards, records in [("warm", 1, 5_000), *[(str(k), k, n) for k, n in backlogs.items()]]:
            name = f"bench-{key}-{time.monotonic_ns()}"
            began = time.perf_counter()
            nbytes = fill(client, name, shards, records, args.record_bytes)
            streams[key] = {"name": name, "records": records, "bytes": nbytes}
            print(f"filled {name}: {records:,} records in {time.perf_counter() - began:.0f} s")
        for master in MASTERS:
            command = [sys.executable, __file__, "--master", master, "--endpoint", endpoint]
            command += ["--streams", json.dumps(streams), "--record-bytes", str(args.record_bytes)]
            command += ["--max-records-per-shard", str(args.max_records_per_shard)]
            command += ["--bare-unpaced"] if args.bare_unpaced else []
            # Each cell's line is echoed as it comes: a run cut short still shows the cells it finished.
            with tempfile.TemporaryFile("w+") as errors:
                child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
                assert child.stdout is not None
                for line in child.stdout:
                    if line.startswith("RESULT "):
                        rows += json.loads(line[7:])
                    else:
                        print(f"{master}: {line.rstrip()}")
                if child.wait() != 0:
                    errors.seek(0)
                    raise SystemExit(f"{master}: exit {child.returncode}\n{errors.read()[-3000:]}")
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)
    paced = "unpaced" if args.bare_unpaced else "paced to 5 calls/s and 2 MB/s per shard"
    print(
        f"\nrecords of ~{args.record_bytes} B; noop sink; bare loop {paced}; {load_average_line('at the end')}"
    )
    print(
        "| master | shards | records | MB | batches | drain s | source rec/s | bare rec/s | ratio | planner CPU s "
        "(start-up) | planner CPU ms/MB after start-up | driver PSS MiB | executors PSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        executors = ", ".join(f"{p / 2**20:,.0f}" for p in r["executor_pss"]) or "-"
        print(
            f"| {r['master']} | {r['shards']} | {r['records']:,} | {r['mb']:.1f} | {r['batches']} | "
            f"{r['seconds']:.0f} | {r['job_rps']:,.0f} | {r['bare_rps']:,.0f} | {r['job_rps'] / r['bare_rps']:.2f} | "
            f"{r['planner_cpu_s']:.2f} ({r['planner_startup_cpu_s']:.2f}) | "
            f"{1000 * (r['planner_cpu_s'] - r['planner_startup_cpu_s']) / r['mb']:.2f} | "
            f"{r['driver_pss'] / 2**20:,.0f} | {executors} |"
        )


if __name__ == "__main__":
    main()
