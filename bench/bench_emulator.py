"""Benchmark: PutRecords entries/s the kit's Kinesis emulator acknowledges, vs the null endpoint, same client.

    .venv/bin/python bench/bench_emulator.py                     # batch 100 (the demo's), 3 x 10 s per side
    .venv/bin/python bench/bench_emulator.py --batch-size 500 --seconds 20 --repetitions 5

Both sides get the same producer: ``--producers`` threads, each with one keep-alive HTTP connection, sending
pre-built PutRecords bodies (sales events from the kit's generator, base64 as botocore sends them) and checking
every reply (``FailedRecordCount`` 0, one ``SequenceNumber`` per entry). The client is deliberately thinner than
botocore, so what is measured is the endpoint, not the client's serialisation.

- null endpoint (lakestack.emulator.null_kinesis): acknowledges without storing; the baseline, i.e. what this
  client can send on this machine.
- the kit's emulator (lakestack.emulator.server: moto behind the fault layer, a 4-shard on-demand stream),
  with a reader beside the producers draining every shard with GetRecords (as the ingest job does), which
  keeps what it read.

Printed per side: median records/s acknowledged over the repetitions, the endpoint process's CPU seconds per
1,000 acknowledged records (psutil, over the timed window), and the ratio emulator / null of the medians.
At the end each shard must read back exactly the records the emulator acknowledged on it, in sequence order
with no gap and nothing twice (moto numbers a shard's records 1, 2, 3, ...); that, or any producer or reader
thread failing (a bad reply, a refused call), exits 1 naming what went wrong.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakestack.emulator import free_port, start_server
from lakestack.emulator.null_kinesis import start_null_kinesis
from lakestack.emulator.provision import emulator_client
from loadtest.generators import make_generator

TARGET = "Kinesis_20131202."
STREAM = "bench-emulator"
# moto takes the account's region from the credential scope, as botocore signs it; the signature is not checked.
AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=lakestack-local/20261124/us-east-1/kinesis/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "0" * 64
)


def build_bodies(batch_size: int, count: int) -> list[bytes]:
    generator = make_generator("sales", seed=7)
    bodies = []
    for _ in range(count):
        records = []
        for _ in range(batch_size):
            event = generator.next_event()
            records.append(
                {"Data": base64.b64encode(event.data).decode(), "PartitionKey": event.partition_key}
            )
        bodies.append(json.dumps({"Records": records, "StreamName": STREAM}).encode())
    return bodies


class Connection:
    """One keep-alive connection speaking Kinesis's JSON 1.1 protocol."""

    def __init__(self, port: int) -> None:
        self._http = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, operation: str, body: bytes) -> dict:
        headers = {
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": TARGET + operation,
            "Authorization": AUTHORIZATION,
            "X-Amz-Date": "20261124T160000Z",
        }
        self._http.request("POST", "/", body=body, headers=headers)
        reply = self._http.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise SystemExit(f"{operation}: HTTP {reply.status}: {data[:500]!r}")
        return json.loads(data)

    def close(self) -> None:
        self._http.close()


@dataclass
class Side:
    acked: list[int] = field(default_factory=list)


def produce(
    port: int,
    bodies: list[bytes],
    *,
    batch_size: int,
    stop: threading.Event,
    counts: list[int],
    slot: int,
    errors: list[str],
    acked: list[tuple[str, int]] | None = None,
) -> None:
    """Send PutRecords until ``stop``; acknowledged (shard, sequence) pairs go to ``acked``, and what went wrong
    to ``errors`` (an exception raised in a thread is otherwise only printed, and the run would pass)."""
    try:
        _produce(port, bodies, batch_size=batch_size, stop=stop, counts=counts, slot=slot, acked=acked)
    except BaseException as error:  # SystemExit included: reported after join()
        errors.append(f"producer {slot}: {error}")


def _produce(
    port: int,
    bodies: list[bytes],
    *,
    batch_size: int,
    stop: threading.Event,
    counts: list[int],
    slot: int,
    acked: list[tuple[str, int]] | None,
) -> None:
    connection = Connection(port)
    n = slot
    try:
        while not stop.is_set():
            reply = connection.call("PutRecords", bodies[n % len(bodies)])
            n += 1
            records = reply["Records"]
            if reply["FailedRecordCount"] != 0 or len(records) != batch_size:
                raise SystemExit(f"PutRecords: expected {batch_size} entries acknowledged, found {reply}")
            if any("SequenceNumber" not in r for r in records):
                raise SystemExit(f"PutRecords: an entry without a sequence number in {reply}")
            if acked is not None:
                acked.extend((r["ShardId"], int(r["SequenceNumber"])) for r in records)
            counts[slot] += batch_size
    finally:
        connection.close()


class Reader(threading.Thread):
    """Drains every shard with GetRecords (Limit 10,000; 0.2 s pause when a pass found nothing)."""

    def __init__(self, port: int, shards: list[str]) -> None:
        super().__init__(daemon=True)
        self._connection = Connection(port)
        self._iterators = {}
        for shard in shards:
            body = json.dumps({"StreamName": STREAM, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"})
            self._iterators[shard] = self._connection.call("GetShardIterator", body.encode())["ShardIterator"]
        self.sequences: dict[str, list[int]] = {shard: [] for shard in shards}
        self.read = 0
        self.stop = threading.Event()
        self.errors: list[str] = []

    def pass_once(self) -> int:
        found = 0
        for shard, iterator in self._iterators.items():
            reply = self._connection.call(
                "GetRecords", json.dumps({"ShardIterator": iterator, "Limit": 10_000}).encode()
            )
            self.sequences[shard].extend(int(record["SequenceNumber"]) for record in reply["Records"])
            found += len(reply["Records"])
            self._iterators[shard] = reply["NextShardIterator"]
        self.read += found
        return found

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.pass_once() == 0:
                    time.sleep(0.2)
        except BaseException as error:  # SystemExit included: reported by drain()
            self.errors.append(f"reader: {error}")

    def drain(self) -> None:
        self.stop.set()
        self.join(timeout=120)
        try:
            if not self.errors:
                while self.pass_once():
                    pass
        except SystemExit as error:
            self.errors.append(f"reader: {error}")
        finally:
            self._connection.close()


def check_read_back(acked: list[tuple[str, int]], read: dict[str, list[int]]) -> list[str]:
    """What is wrong with what each shard read back, given what was acknowledged on it; [] if nothing.

    A fresh stream read from TRIM_HORIZON: each shard's records come back numbered 1, 2, 3, ... (moto's
    numbering), in that order, and they are exactly the ones acknowledged on that shard.
    """
    by_shard: dict[str, list[int]] = {shard: [] for shard in read}
    for shard, sequence in acked:
        by_shard.setdefault(shard, []).append(sequence)
    problems = []
    for shard, sequences in sorted(by_shard.items()):
        got = read.get(shard, [])
        for position, sequence in enumerate(got, start=1):
            if sequence != position:
                before = got[position - 2] if position > 1 else "the start"
                problems.append(f"{shard}: read {sequence} after {before} (expected {position})")
                break
        if sorted(sequences) != got:
            missing = len(set(sequences) - set(got))
            extra = len(set(got) - set(sequences))
            problems.append(
                f"{shard}: {len(sequences):,} acknowledged, {len(got):,} read back "
                f"({missing:,} acknowledged not read, {extra:,} read not acknowledged)"
            )
    return problems


def timed_run(
    port: int,
    pid: int,
    bodies: list[bytes],
    *,
    batch_size: int,
    producers: int,
    seconds: float,
    errors: list[str],
    acked: list[tuple[str, int]] | None = None,
) -> tuple[float, float, int]:
    """(records/s acknowledged, endpoint CPU s per 1,000 records) of one window of ``seconds``; what went
    wrong in a producer goes to ``errors``."""
    stop = threading.Event()
    counts = [0] * producers
    threads = [
        threading.Thread(
            target=produce,
            args=(port, bodies),
            kwargs={
                "batch_size": batch_size,
                "stop": stop,
                "counts": counts,
                "slot": slot,
                "errors": errors,
                "acked": acked,
            },
            daemon=True,
        )
        for slot in range(producers)
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # connections open, first replies in: the window starts warm
    server = psutil.Process(pid)
    cpu0, n0, t0 = sum(server.cpu_times()[:2]), sum(counts), time.perf_counter()
    time.sleep(seconds)
    cpu1, n1, t1 = sum(server.cpu_times()[:2]), sum(counts), time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
        if thread.is_alive():
            errors.append(f"{thread.name}: still running 60 s after the window ended")
    records = n1 - n0
    if records == 0:
        if not errors:  # a failed thread already says why nothing was acknowledged
            errors.append(f"no record acknowledged in the {seconds} s window")
        return 0.0, 0.0, sum(counts)
    return records / (t1 - t0), (cpu1 - cpu0) / records * 1000, sum(counts)


def run_repetitions(
    args: argparse.Namespace,
    bodies: list[bytes],
    endpoints: dict[str, tuple[int, int]],
    *,
    rates: dict[str, list[float]],
    cpu: dict[str, list[float]],
    errors: list[str],
    acked: list[tuple[str, int]],
) -> int:
    """The timed windows, both sides per repetition (stopping at the first error); records the emulator
    acknowledged."""
    total = 0
    for repetition in range(args.repetitions):
        # Alternate which side goes first, so a drift in the machine's load hits both alike.
        order = ("null", "emulator") if repetition % 2 == 0 else ("emulator", "null")
        for side in order:
            port, pid = endpoints[side]
            rate, per_1000, sent = timed_run(
                port,
                pid,
                bodies,
                batch_size=args.batch_size,
                producers=args.producers,
                seconds=args.seconds,
                errors=errors,
                acked=acked if side == "emulator" else None,
            )
            rates[side].append(rate)
            cpu[side].append(per_1000)
            if side == "emulator":
                total += sent
            print(f"  {side:>8}: {rate:>8,.0f} records/s, {per_1000:.3f} CPU s per 1,000", flush=True)
            if errors:
                return total
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch-size", type=int, default=100, help="entries per PutRecords (default: the demo's 100)"
    )
    parser.add_argument(
        "--producers", type=int, default=4, help="concurrent producer connections (default 4)"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="timed window per repetition")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--no-reader", action="store_true", help="no GetRecords reader beside the producers")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "lakestack-local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "lakestack-local")
    bodies = build_bodies(args.batch_size, 200)

    rates: dict[str, list[float]] = {"null": [], "emulator": []}
    cpu: dict[str, list[float]] = {"null": [], "emulator": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        null_port, emu_port = free_port(), free_port()
        null = start_null_kinesis(null_port, log_path=Path(tmp) / "null.log")
        emulator = start_server(emu_port, log_path=Path(tmp) / "moto.log")
        try:
            kinesis = emulator_client("kinesis", f"http://127.0.0.1:{emu_port}", "us-east-1")
            kinesis.create_stream(StreamName=STREAM, StreamModeDetails={"StreamMode": "ON_DEMAND"})
            kinesis.get_waiter("stream_exists").wait(StreamName=STREAM, WaiterConfig={"Delay": 0.2})
            shards = [s["ShardId"] for s in kinesis.list_shards(StreamName=STREAM)["Shards"]]
            reader = None if args.no_reader else Reader(emu_port, shards)
            if reader:
                reader.start()
            errors: list[str] = []
            acked: list[tuple[str, int]] = []
            total = run_repetitions(
                args,
                bodies,
                {"null": (null_port, null.pid), "emulator": (emu_port, emulator.pid)},
                rates=rates,
                cpu=cpu,
                errors=errors,
                acked=acked,
            )
            if reader:
                reader.drain()
                errors += reader.errors
                if not errors:
                    errors += check_read_back(acked, reader.sequences)
            if errors:
                print(f"the run failed ({len(errors)} problem(s)):", *errors[:20], sep="\n  ")
                return 1
        finally:
            for process in (null, emulator):
                process.terminate()
                process.wait(timeout=10)
    load_after = os.getloadavg()
    null_rate, emu_rate = statistics.median(rates["null"]), statistics.median(rates["emulator"])
    print(
        f"batch {args.batch_size}, {args.producers} producers, {args.repetitions} x {args.seconds:g} s, "
        f"reader {'off' if args.no_reader else 'on'}; load average {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print(
        f"null endpoint: median {null_rate:,.0f} records/s, {statistics.median(cpu['null']):.3f} CPU s per 1,000"
    )
    print(
        f"emulator:      median {emu_rate:,.0f} records/s, {statistics.median(cpu['emulator']):.3f} CPU s per 1,000"
        + ("" if args.no_reader else f"; all {total:,} acknowledged records read back in order")
    )
    print(f"ratio emulator / null: {emu_rate / null_rate:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
