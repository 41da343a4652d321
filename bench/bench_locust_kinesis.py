"""Benchmark: records/s of the Locust Kinesis user vs a bare boto3 PutRecords loop, same emulator, same run.

    .venv/bin/python bench/bench_locust_kinesis.py            # ~2 minutes
    .venv/bin/python bench/bench_locust_kinesis.py --full     # bigger runs, more repetitions

Both sides send sales events from the same generator with the same batch size to the same emulator
(the project's moto server from lakestack.emulator, started here on 127.0.0.1), one sequential producer each
(Locust: 1 user), a fresh stream per run, alternating which side goes first. The Locust side is a real headless Locust process;
its records/s is Locust's own statistic for the `record` entries (what a user sees). Target: ratio >= 0.8.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakestack.emulator import free_port, start_server
from loadtest.clients.kinesis import KinesisProducer
from loadtest.generators import make_generator
from loadtest.runner import LocustRun

TARGET_RATIO = 0.8


def start_moto(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    return start_server(port, log_path=workdir / "moto.log"), f"http://127.0.0.1:{port}"


def create_stream(client, name: str) -> None:
    client.create_stream(StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def run_boto3(client, stream: str, events: int, batch_size: int) -> float:
    """Records/s of a bare loop: generate a batch, PutRecords, resend failed entries (same client code)."""
    generator = make_generator("sales", seed=1)
    producer = KinesisProducer(client, stream)
    sent = 0
    started = time.perf_counter()
    while sent < events:
        batch = [generator.next_event() for _ in range(min(batch_size, events - sent))]
        result = producer.send(batch)
        if result.failed:
            raise SystemExit(f"baseline: {len(result.failed)} entries failed")
        sent += len(batch)
    return events / (time.perf_counter() - started)


def run_locust(
    endpoint: str, stream: str, events: int, *, batch_size: int, users: int, workdir: Path
) -> float:
    """Records/s as Locust reports it for the `record` entries of a headless run of `events` events."""
    prefix = workdir / f"{stream}"
    argv = LocustRun(
        stream=stream,
        region="us-east-1",
        endpoint_url=endpoint,
        ledger_dir=str(workdir / f"{stream}-ledger"),
        users=users,
        spawn_rate=max(users, 1),
        run_time="300s",
        max_events=events,
        batch_size=batch_size,
        csv_prefix=str(prefix),
        extra=["--only-summary", "--loglevel", "WARNING"],
    ).argv()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        raise SystemExit(f"locust exited {done.returncode}:\n{done.stderr[-3000:]}")
    with open(f"{prefix}_stats.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["Type"] == "PutRecords" and row["Name"] == "record":
                if int(row["Request Count"]) != events or int(row["Failure Count"]) != 0:
                    raise SystemExit(f"locust: expected {events} acknowledged records, stats say {row}")
                return float(row["Requests/s"])
    raise SystemExit(f"locust: no PutRecords/record row in {prefix}_stats.csv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", default=os.environ.get("LAKESTACK_BENCH_FULL") == "1")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--users", type=int, default=1)
    # Runs must be long enough that Locust's start-up (process, spawn, first request) is not what is timed:
    # at ~6k records/s, 20k events last ~3 s, of which start-up is a sixth.
    parser.add_argument("--events", type=int, default=None, help="events per run (default 60k; --full 200k)")
    args = parser.parse_args()
    events, repetitions = (200_000, 5) if args.full else (60_000, 3)
    events = args.events or events

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    baseline: list[float] = []
    harness: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        moto, endpoint = start_moto(Path(tmp))
        client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        try:
            for rep in range(repetitions):
                order = ("boto3", "locust") if rep % 2 == 0 else ("locust", "boto3")
                for side in order:
                    stream = f"bench-{side}-{rep}"
                    create_stream(client, stream)
                    if side == "boto3":
                        rate = run_boto3(client, stream, events, args.batch_size)
                        baseline.append(rate)
                    else:
                        rate = run_locust(
                            endpoint,
                            stream,
                            events,
                            batch_size=args.batch_size,
                            users=args.users,
                            workdir=Path(tmp),
                        )
                        harness.append(rate)
                    print(f"rep {rep + 1}/{repetitions} {side:6s}: {rate:9,.0f} records/s", flush=True)
        finally:
            moto.terminate()
            moto.wait(timeout=30)

    base, loc = statistics.median(baseline), statistics.median(harness)
    ratio = loc / base
    print(
        f"\n{events:,} sales events per run, batch {args.batch_size}, {repetitions} repetitions, "
        f"Locust users {args.users}"
    )
    print(f"bare boto3 PutRecords loop : median {base:9,.0f} records/s")
    print(f"Locust Kinesis user        : median {loc:9,.0f} records/s")
    print(
        f"ratio Locust / boto3       : {ratio:.2f} (target >= {TARGET_RATIO}) -> {'MET' if ratio >= TARGET_RATIO else 'NOT MET'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
