"""The abstract Kinesis user driven in-process with a fake stream (no network, no greenlets started)."""

from __future__ import annotations

import random
from typing import ClassVar

from locust import events, task
from locust.argument_parser import parse_options
from locust.env import Environment

from loadtest.clients._base import Producer
from loadtest.clients.kinesis import MAX_BYTES_PER_RECORD, KinesisProducer
from loadtest.events import Event
from loadtest.generators import Generator
from loadtest.ledger import ProducerStats, read_ledger, read_producer_stats
from loadtest.options import LoadSettings
from loadtest.users import KinesisUser, process_state

THROTTLED = "ProvisionedThroughputExceededException"


class ScriptedGenerator:
    scenario = "sales"

    def __init__(self, events: list[Event]) -> None:
        self.events = list(events)

    def next_event(self) -> Event:
        return self.events.pop(0)

    def ground_truth(self) -> dict:
        return {"scenario": "sales", "events": 4}


class FakeKinesis:
    def __init__(self, plan: list[list[str | None]]) -> None:
        self.plan = plan
        self.sent: list[list[str]] = []

    def put_records(self, *, StreamName: str, Records: list[dict]) -> dict:
        self.sent.append([r["PartitionKey"] for r in Records])
        step = self.plan.pop(0)
        return {
            "FailedRecordCount": sum(c is not None for c in step),
            "Records": [
                {"ShardId": "shardId-000000000002", "SequenceNumber": str(100 + i)}
                if c is None
                else {"ErrorCode": c, "ErrorMessage": "slow down"}
                for i, c in enumerate(step)
            ],
        }


class Load(KinesisUser):
    """The Kinesis user with its two seams filled: a scripted generator and a producer on a fake stream."""

    stream = FakeKinesis([[None, THROTTLED, None], [None]])
    script: ClassVar[list[Event]] = [
        Event("e0", "2026-01-01T00:00:00.000000Z", "k0", b"{}"),
        Event("big", "2026-01-01T00:00:00.000001Z", "k1", b"x" * MAX_BYTES_PER_RECORD),
        Event("e2", "2026-01-01T00:00:00.000002Z", "k2", b"{}"),
        Event("e3", "2026-01-01T00:00:00.000003Z", "k3", b"{}"),
    ]

    def make_generator(self, settings: LoadSettings, *, seed: int | None) -> Generator:
        return ScriptedGenerator(self.script)

    def make_producer(self, settings: LoadSettings) -> Producer:
        fire = self.environment.events.request.fire
        return KinesisProducer(
            self.stream, settings.stream, fire=fire, sleep=lambda _: None, rng=random.Random(0)
        )

    @task
    def put(self) -> None:
        self.send_batch()


def test_batch_with_an_oversized_event_and_a_throttled_entry(tmp_path):
    options = parse_options(
        ["--stream", "s", "--batch-size", "4", "--max-events", "4", "--ledger", str(tmp_path)]
    )
    env = Environment(user_classes=[Load], parsed_options=options, events=events)  # lakestack's listeners
    env.create_local_runner()
    env.events.test_start.fire(environment=env)  # the runner's quota: --max-events 4
    user = Load(env)
    user.on_start()
    user.send_batch()

    fake = Load.stream
    assert fake.sent == [["k0", "k2", "k3"], ["k2"]]  # the oversized event never left; only k2 was resent
    assert [(e.event_id, e.sequence_number) for e in read_ledger(tmp_path)] == [
        ("e0", "100"),
        ("e3", "102"),
        ("e2", "100"),
    ]
    state = process_state(env)
    assert (state.quota.acknowledged, state.quota.failed) == (3, 1)
    records = env.stats.get("record", "PutRecords")
    assert (records.num_requests, records.num_failures) == (5, 2)  # 3 + 1 sent, 1 throttled, 1 refused

    env.events.quitting.fire(environment=env)
    assert env.process_exit_code == 1  # one event (the oversized one) was never acknowledged
    # What the producer went through, next to the ledger for the run report.
    assert read_producer_stats(tmp_path) == ProducerStats(
        calls=2, acknowledged=3, failed=1, throttled=1, retried=1, call_errors=0
    )
    truth = list(tmp_path.glob("truth-sales-*-0.json"))
    assert [p.read_text() for p in truth] == ['{\n "scenario": "sales",\n "events": 4\n}']


class BulkLoad(KinesisUser):
    """The Kinesis user's own producer (statistics wiring included) on a fake stream."""

    stream = FakeKinesis([[None, THROTTLED, None], [None]])
    script = Load.script

    def make_generator(self, settings: LoadSettings, *, seed: int | None) -> Generator:
        return ScriptedGenerator(self.script)

    def client(self, settings: LoadSettings) -> FakeKinesis:
        return self.stream

    @task
    def put(self) -> None:
        self.send_batch()


def test_kinesis_user_logs_accepted_records_in_bulk_and_failures_one_by_one(tmp_path):
    options = parse_options(
        ["--stream", "s", "--batch-size", "4", "--max-events", "4", "--ledger", str(tmp_path)]
    )
    env = Environment(user_classes=[BulkLoad], parsed_options=options, events=events)
    env.create_local_runner()
    fired: list[str] = []

    def count(name: str, exception: Exception | None = None, **_: object) -> None:
        fired.append(f"{name}:{'ok' if exception is None else type(exception).__name__}")

    env.events.request.add_listener(count)
    try:
        env.events.test_start.fire(environment=env)
        user = BulkLoad(env)
        user.on_start()
        user.send_batch()
    finally:
        env.events.request.remove_listener(count)

    # The refused event, then per call: the call and its one throttled entry; accepted entries fire nothing.
    assert fired == ["record:RecordTooLargeError", "call:ok", "record:EntryFailure", "call:ok"]
    records = env.stats.get("record", "PutRecords")
    assert (records.num_requests, records.num_failures) == (5, 2)  # 3 + 1 sent, 1 throttled, 1 refused
    assert [(e.event_id, e.sequence_number) for e in read_ledger(tmp_path)] == [
        ("e0", "100"),
        ("e3", "102"),
        ("e2", "100"),
    ]
