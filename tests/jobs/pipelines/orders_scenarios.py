"""Orders scenarios for the tests: the generator's CDC events as parsed changes, cut into micro-batches."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pyarrow as pa

from jobs.pipelines._cdc import CHANGE_SCHEMA
from loadtest.generators import OrdersGenerator

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at_t0() -> datetime:
    """The writers' clock: tombstone retention runs on order_ts against it, and the scenarios' orders are now."""
    return T0


def parse(events) -> pa.Table:
    """Generator events as parsed changes (what the job's envelope hands the writers)."""
    rows = []
    for event in events:
        body = json.loads(event.data)
        rows.append(
            {
                **{k: body[k] for k in ("change_id", "op", "order_id", "customer_id", "amount", "status")},
                "order_ts": datetime.fromisoformat(body["order_ts"]),
                "event_id": body["event_id"],
                "event_time": datetime.fromisoformat(body["event_time"]),
            }
        )
    return pa.Table.from_pylist(rows, schema=CHANGE_SCHEMA)


def as_expected(rows: pa.Table) -> list[dict]:
    """Current orders in the generator's ``expected_state`` shape."""
    return [
        {
            "order_id": r["order_id"],
            "order_ts": r["order_ts"].strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "customer_id": r["customer_id"],
            "amount": r["amount"],
            "status": r["status"],
        }
        for r in rows.to_pylist()
    ]


def scenario(seed: int, events: int, **rates) -> tuple[list[pa.Table], list[dict]]:
    """Micro-batches of random sizes, and the state the generator says they must end in."""
    generator = OrdersGenerator(random.Random(seed), clock=at_t0, open_orders=20, **rates)
    changes = parse([generator.next_event() for _ in range(events)])
    rng, batches, at = random.Random(seed), [], 0
    while at < changes.num_rows:
        size = rng.randint(1, 40)
        batches.append(changes.slice(at, size))
        at += size
    return batches, generator.expected_state()


def bronze_rows(payloads: list[bytes], *, first_sequence: int = 0) -> pa.Table:
    """Bronze rows (the ingest job's columns) holding ``payloads`` as they arrived."""
    count = len(payloads)
    return pa.table(
        {
            "data": pa.array(payloads, pa.binary()),
            "partition_key": [f"k{i % 7}" for i in range(count)],
            "shard_id": ["shardId-000000000000"] * count,
            "sequence_number": [str(first_sequence + i) for i in range(count)],
            "arrival_time": pa.array([T0] * count, pa.timestamp("us", tz="UTC")),
            "ingest_time": pa.array([T0] * count, pa.timestamp("us", tz="UTC")),
            "batch_id": pa.array([0] * count, pa.int64()),
        }
    )


def orders_payloads(seed: int, events: int, **options) -> tuple[list[bytes], list[dict]]:
    """The generator's orders events as bronze payloads (``event_type`` set), and the expected final state."""
    generator = OrdersGenerator(random.Random(seed), clock=at_t0, open_orders=20, **options)
    payloads = []
    for _ in range(events):
        body = json.loads(generator.next_event().data)
        body.setdefault("event_type", "orders")
        payloads.append(json.dumps(body, separators=(",", ":")).encode())
    return payloads, generator.expected_state()


def several_sources(seeds: list[int], events: int, **rates) -> tuple[list[pa.Table], list[dict]]:
    """Several generators (as Locust users are) interleaved at random, each numbering its changes from 1;
    micro-batches of random sizes; and the union of their expected states."""
    rng = random.Random(sum(seeds))
    generators = [OrdersGenerator(random.Random(s), clock=at_t0, open_orders=10, **rates) for s in seeds]
    changes = parse([rng.choice(generators).next_event() for _ in range(events)])
    batches, at = [], 0
    while at < changes.num_rows:
        size = rng.randint(1, 60)
        batches.append(changes.slice(at, size))
        at += size
    expected = sorted((row for g in generators for row in g.expected_state()), key=lambda r: r["order_id"])
    return batches, expected
