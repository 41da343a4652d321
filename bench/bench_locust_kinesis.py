"""Benchmark: records/s per core of the Locust Kinesis user vs a bare boto3 PutRecords loop, same endpoint.

    .venv/bin/python bench/bench_locust_kinesis.py                      # null endpoint, ~1-2 minutes
    .venv/bin/python bench/bench_locust_kinesis.py --endpoint emulator  # the kit's moto emulator instead
    .venv/bin/python bench/bench_locust_kinesis.py --full               # bigger runs, more repetitions

The endpoint is by default a null Kinesis endpoint (lakestack.emulator.null_kinesis, its own process on
127.0.0.1): it acknowledges every PutRecords entry at once, so the producer is what is measured, not an
emulator. Both sides send sales events from the same generator with the same batch size, one sequential
producer each (Locust: 1 user), alternating which side goes first.

- bare boto3 loop: generate a batch, ``client.put_records`` with boto3's default client, check
  ``FailedRecordCount``: what a script would do, with nothing else (no ledger, no statistics, no retries).
- Locust Kinesis user: a real headless Locust process of the kit's user (quota, per-entry reporting to
  Locust's statistics, the ledger written per reply, failed entries resent).

Records per core is records per CPU-second of the producer's process: the CPU time of the bare loop, and of
the Locust process between its first and last acknowledged batch (sampled with psutil, so Python's and
Locust's start-up are not charged), which holds on a machine whose other cores are busy. Wall-clock records/s
are printed too. Targets: ratio >= 0.9 and >= 15,000 records/s per core for the Locust user.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakestack.emulator import free_port, start_server
from lakestack.emulator.null_kinesis import start_null_kinesis
from loadtest.generators import make_generator
from loadtest.runner import LocustRun

TARGET_RATIO = 0.9
TARGET_PER_CORE = 15_000


def create_stream(client, name: str) -> None:
    client.create_stream(StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def run_boto3(endpoint: str, stream: str, events: int, batch_size: int) -> tuple[float, float]:
    """(records/s wall, records per CPU-second) of a bare loop: generate, put_records, check the reply."""
    client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
    generator = make_generator("sales", seed=1)
    sent = 0
    started, cpu = time.perf_counter(), time.process_time()
    while sent < events:
        batch = [generator.next_event() for _ in range(min(batch_size, events - sent))]
        reply = client.put_records(
            StreamName=stream, Records=[{"Data": e.data, "PartitionKey": e.partition_key} for e in batch]
        )
        if reply["FailedRecordCount"]:
            raise SystemExit(f"baseline: {reply['FailedRecordCount']} entries failed")
        sent += len(batch)
    wall, used = time.perf_counter() - started, time.process_time() - cpu
    return events / wall, events / used


def _ledger_lines(folder: Path) -> int:
    total = 0
    for path in folder.glob("ledger-*.jsonl"):
        with path.open("rb") as handle:
            total += handle.read().count(b"\n")
    return total


def run_locust(
    endpoint: str, stream: str, events: int, *, batch_size: int, users: int, workdir: Path
) -> tuple[float, float]:
    """(records/s wall, records per CPU-second) of a headless Locust run, between its first and last
    acknowledged entries (CPU and ledger sampled every 0.1 s)."""
    ledger = workdir / f"{stream}-ledger"
    argv = LocustRun(
        stream=stream,
        region="us-east-1",
        endpoint_url=endpoint,
        ledger_dir=str(ledger),
        users=users,
        spawn_rate=max(users, 1),
        run_time="300s",
        max_events=events,
        batch_size=batch_size,
        extra=["--only-summary", "--loglevel", "WARNING"],
    ).argv()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watched = psutil.Process(process.pid)
    samples: list[tuple[float, float, int]] = []  # wall, cpu, acknowledged
    deadline = time.monotonic() + 400
    try:
        while process.poll() is None and time.monotonic() < deadline:
            try:
                times = watched.cpu_times()
                samples.append((time.perf_counter(), times.user + times.system, _ledger_lines(ledger)))
            except psutil.Error:
                break
            time.sleep(0.1)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    if process.returncode != 0:
        raise SystemExit(f"locust exited {process.returncode}:\n{stderr.decode()[-3000:]}")
    if _ledger_lines(ledger) != events:
        raise SystemExit(
            f"locust: expected {events} acknowledged entries in the ledger, found {_ledger_lines(ledger)}"
        )
    sending = [s for s in samples if 0 < s[2]]
    first, last = sending[0], sending[-1]
    if last[2] - first[2] < events // 2:
        raise SystemExit("locust: too few samples while sending; raise --events")
    records = last[2] - first[2]
    return records / (last[0] - first[0]), records / (last[1] - first[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", default=os.environ.get("LAKESTACK_BENCH_FULL") == "1")
    parser.add_argument("--endpoint", choices=("null", "emulator"), default="null")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--events", type=int, default=None, help="events per run (default 100k; --full 300k)")
    parser.add_argument("--repetitions", type=int, default=None, help="default 3; --full 5")
    args = parser.parse_args()
    events, repetitions = (300_000, 5) if args.full else (100_000, 3)
    events = args.events or events
    repetitions = args.repetitions or repetitions

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    wall: dict[str, list[float]] = {"boto3": [], "locust": []}
    per_core: dict[str, list[float]] = {"boto3": [], "locust": []}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        if args.endpoint == "null":
            server = start_null_kinesis(port, log_path=Path(tmp) / "null.log")
        else:
            server = start_server(port, log_path=Path(tmp) / "moto.log")
        endpoint = f"http://127.0.0.1:{port}"
        admin = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        try:
            for rep in range(repetitions):
                order = ("boto3", "locust") if rep % 2 == 0 else ("locust", "boto3")
                for side in order:
                    stream = f"bench-{side}-{rep}"
                    if args.endpoint == "emulator":
                        create_stream(admin, stream)
                    if side == "boto3":
                        rate, core = run_boto3(endpoint, stream, events, args.batch_size)
                    else:
                        rate, core = run_locust(
                            endpoint,
                            stream,
                            events,
                            batch_size=args.batch_size,
                            users=args.users,
                            workdir=Path(tmp),
                        )
                    wall[side].append(rate)
                    per_core[side].append(core)
                    print(
                        f"rep {rep + 1}/{repetitions} {side:6s}: {rate:9,.0f} records/s wall, "
                        f"{core:9,.0f} records per CPU-second",
                        flush=True,
                    )
        finally:
            server.terminate()
            server.wait(timeout=30)

    load = os.getloadavg()[0]
    base, loc = statistics.median(per_core["boto3"]), statistics.median(per_core["locust"])
    ratio = loc / base
    wall_ratio = statistics.median(wall["locust"]) / statistics.median(wall["boto3"])
    print(
        f"\n{events:,} sales events per run, batch {args.batch_size}, {repetitions} repetitions, Locust users "
        f"{args.users}, {args.endpoint} endpoint, load average {load:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"bare boto3 PutRecords loop : median {base:9,.0f} records per core-second ({statistics.median(wall['boto3']):,.0f}/s wall)"
    )
    print(
        f"Locust Kinesis user        : median {loc:9,.0f} records per core-second ({statistics.median(wall['locust']):,.0f}/s wall)"
    )
    print(
        f"ratio Locust / boto3       : {ratio:.2f} per core, {wall_ratio:.2f} wall (target >= {TARGET_RATIO}) -> {'MET' if ratio >= TARGET_RATIO else 'NOT MET'}"
    )
    print(
        f"Locust records per core    : {loc:,.0f} (target >= {TARGET_PER_CORE:,}) -> {'MET' if loc >= TARGET_PER_CORE else 'NOT MET'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
