"""Benchmark: what a producer says it sent vs what the stream holds, through a throttling emulator.

    .venv/bin/python bench/bench_naive_producer.py                       # 10k events each, put-throttle=0.2
    .venv/bin/python bench/bench_naive_producer.py --events 50000 --faults put-throttle=0.3,kinesis-5xx=0.02

The same number of sales events (same generator, same batch size) go twice through the project's emulator
with the same faults armed, each time into a fresh stream:
- naive: the producer of the public Locust-for-Kinesis sample: one ``put_records`` per batch, the reply's
  ``FailedRecordCount`` ignored, every event counted as sent;
- kit: a headless Locust run of the kit's Kinesis user (failed entries resent with backoff, only
  acknowledged events counted, each in the ledger).
Then each stream is read back (faults stopped: the reading is the measurement) and its distinct event ids
counted. The ratio is delivered / reported: the kit's target is 1.00, the naive producer's shortfall is the
silent loss.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakestack.emulator import arm_faults, free_port, parse_fault_spec, start_server, stop_faults
from loadtest.generators import make_generator
from loadtest.ledger import read_ledger, read_producer_stats
from loadtest.runner import LocustRun

SEED = 11


def create_stream(client: Any, name: str) -> None:
    client.create_stream(StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def run_naive(client: Any, stream: str, events: int, batch_size: int) -> int:
    """The sample's producer: put_records per batch, reply not looked at; returns what it counts as sent."""
    generator = make_generator("sales", seed=SEED)
    sent = 0
    while sent < events:
        batch = [generator.next_event() for _ in range(min(batch_size, events - sent))]
        client.put_records(
            StreamName=stream, Records=[{"Data": e.data, "PartitionKey": e.partition_key} for e in batch]
        )
        sent += len(batch)
    return sent


def run_kit(endpoint: str, stream: str, events: int, batch_size: int, workdir: Path) -> tuple[int, int, Any]:
    """A headless Locust run of the kit's user; returns (acknowledged per the ledger, exit status, counts)."""
    ledger = workdir / f"{stream}-ledger"
    argv = LocustRun(
        stream=stream,
        region="us-east-1",
        endpoint_url=endpoint,
        ledger_dir=str(ledger),
        users=2,
        spawn_rate=2,
        run_time="600s",
        max_events=events,
        batch_size=batch_size,
        extra=["--only-summary", "--loglevel", "WARNING", "--seed", str(SEED)],
    ).argv()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=700)
    return len(read_ledger(ledger)), done.returncode, read_producer_stats(ledger)


def stream_holds(client: Any, stream: str) -> tuple[int, int]:
    """(distinct event ids, records) in every shard of the stream, read from the trim horizon."""
    ids: set[str] = set()
    records = 0
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            reply = client.get_records(ShardIterator=iterator, Limit=10_000)
            for record in reply["Records"]:
                ids.add(json.loads(record["Data"])["event_id"])
            records += len(reply["Records"])
            if not reply["Records"] and not reply.get("MillisBehindLatest"):
                break
            iterator = reply.get("NextShardIterator")
    return len(ids), records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, default=10_000, help="events per producer (default: %(default)s)"
    )
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--faults", default="put-throttle=0.2", help="fault spec (default: %(default)s)")
    parser.add_argument("--faults-seed", type=int, default=7)
    args = parser.parse_args()
    spec = parse_fault_spec(args.faults)

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    rows: list[tuple[str, int, int, int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        moto = start_server(port, log_path=Path(tmp) / "moto.log")
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        try:
            for side in ("naive", "kit"):
                stream = f"bench-{side}"
                create_stream(client, stream)
                arm_faults(endpoint, spec, seed=args.faults_seed)
                started = time.perf_counter()
                if side == "naive":
                    reported = run_naive(client, stream, args.events, args.batch_size)
                    note = "FailedRecordCount ignored"
                else:
                    reported, status, counts = run_kit(
                        endpoint, stream, args.events, args.batch_size, Path(tmp)
                    )
                    note = (
                        f"Locust exit {status}; {counts.throttled:,} throttled entries resent"
                        if counts
                        else ""
                    )
                seconds = time.perf_counter() - started
                tally = stop_faults(endpoint)
                distinct, records = stream_holds(client, stream)
                rows.append((side, reported, distinct, records, seconds))
                injected = tally["kinds"].get("put-throttle", {})
                print(
                    f"{side:5s}: reported {reported:,} sent, stream holds {distinct:,} distinct events "
                    f"({records:,} records) in {seconds:.1f}s; put-throttle injected {injected.get('injected', 0):,}, "
                    f"survived {injected.get('survived', 0):,}; {note}",
                    flush=True,
                )
        finally:
            moto.terminate()
            moto.wait(timeout=30)

    print(
        f"\n{args.events:,} sales events per producer, batch {args.batch_size}, faults {spec.to_text()} "
        f"(seed {args.faults_seed})"
    )
    print(
        f"{'producer':42s} {'reported sent':>14s} {'in the stream':>14s} {'lost silently':>14s} {'delivered/reported':>19s}"
    )
    labels = {"naive": "naive (sample: FailedRecordCount ignored)", "kit": "kit (Locust Kinesis user)"}
    for side, reported, distinct, _records, _seconds in rows:
        ratio = distinct / reported if reported else 0.0
        print(
            f"{labels[side]:42s} {reported:14,} {distinct:14,} {max(0, reported - distinct):14,} {ratio:19.3f}"
        )
    kit = next(row for row in rows if row[0] == "kit")
    met = kit[1] == kit[2] == kit[3] == args.events
    print(
        f"kit target: every event reported sent is in the stream, exactly once -> {'MET' if met else 'NOT MET'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
