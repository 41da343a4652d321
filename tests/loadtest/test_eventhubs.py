"""The Event Hubs (Kafka protocol) producer and Locust user: delivery reports sorted (stub), then for real
against a Kafka-protocol broker on 127.0.0.1 (Tansu, the local Event Hubs stand-in)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from locust.env import Environment

from loadtest.clients.eventhubs import EventHubsProducer, kafka_config
from loadtest.errors import OptionError
from loadtest.events import Event
from loadtest.ledger import read_ledger
from loadtest.runner import LocustRun


class StubMessage:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class StubProducer:
    """Stands in for confluent_kafka.Producer: delivery reports arrive on flush; some keys fail."""

    def __init__(self, failing_keys: set[bytes]) -> None:
        self.failing_keys = failing_keys
        self.produced: list[tuple[str, bytes, bytes]] = []
        self._callbacks = []

    def produce(self, topic: str, *, value: bytes, key: bytes, on_delivery) -> None:
        self.produced.append((topic, key, value))
        self._callbacks.append((key, on_delivery))

    def flush(self, timeout: float) -> int:
        for offset, (key, callback) in enumerate(self._callbacks):
            if key in self.failing_keys:
                callback("KafkaError{code=MSG_SIZE_TOO_LARGE}", None)
            else:
                callback(None, StubMessage(int(key[-1:]) % 2, 100 + offset))
        self._callbacks = []
        return 0


def test_event_hubs_producer_sorts_delivery_reports_and_reports_to_locust():
    env = Environment()
    env.create_local_runner()
    stub = StubProducer(failing_keys={b"k2"})
    producer = EventHubsProducer(stub, "hub", fire=env.events.request.fire)
    batch = [Event(f"id-{n}", "2026-01-01T00:00:00.000000Z", f"k{n}", f"v{n}".encode()) for n in range(4)]

    result = producer.send(batch)

    assert stub.produced == [
        ("hub", b"k0", b"v0"),
        ("hub", b"k1", b"v1"),
        ("hub", b"k2", b"v2"),
        ("hub", b"k3", b"v3"),
    ]
    assert [(a.event.event_id, a.shard_id, a.sequence_number) for a in result.acknowledged] == [
        ("id-0", "partition-0", "100"),
        ("id-1", "partition-1", "101"),
        ("id-3", "partition-1", "103"),
    ]
    assert [(f.event.event_id, f.error_message) for f in result.failed] == [
        ("id-2", "KafkaError{code=MSG_SIZE_TOO_LARGE}")
    ]
    records = env.stats.get("record", "Kafka")
    assert (records.num_requests, records.num_failures) == (4, 1)
    assert env.stats.get("flush", "Kafka").num_requests == 1


def test_kafka_config_uses_the_event_hubs_sasl_convention():
    config = kafka_config("ns.servicebus.windows.net:9093", "Endpoint=sb://ns/;SharedAccessKey=k")
    assert {
        k: config[k] for k in ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username")
    } == {
        "bootstrap.servers": "ns.servicebus.windows.net:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "$ConnectionString",
    }
    assert "batch.num.messages" not in config  # Event Hubs keeps librdkafka's batching


def test_kafka_config_is_accepted_by_confluent_kafka_which_refuses_a_wrong_one():
    kafka = pytest.importorskip("confluent_kafka")
    config = kafka_config("127.0.0.1:1", "Endpoint=sb://ns/;SharedAccessKey=k")
    # Building the client validates every setting name and value; no broker is contacted until a send.
    producer = kafka.Producer({**config, "socket.connection.setup.timeout.ms": 1000})
    assert isinstance(producer, kafka.Producer)
    # The check has teeth: the same settings with one wrong value are refused, naming it.
    with pytest.raises(kafka.KafkaException, match="Unsupported SASL mechanism: PLAN"):
        kafka.Producer({**config, "sasl.mechanism": "PLAN"})


def test_plaintext_only_to_a_broker_on_this_machine():
    local = kafka_config("127.0.0.1:9092", None)
    # One record per batch: what keeps the local broker's ListOffsets and mid-batch fetches exact.
    assert (local["security.protocol"], local["batch.num.messages"]) == ("PLAINTEXT", 1)
    assert kafka_config("localhost:9092,[::1]:9093", "")["security.protocol"] == "PLAINTEXT"
    with pytest.raises(OptionError, match=r"Set LAKESTACK_EVENTHUBS_CONNECTION_STRING"):
        kafka_config("ns.servicebus.windows.net:9093", None)


def _consume_all(bootstrap: str, topic: str, expected: int) -> dict[tuple[str, str], bytes]:
    """Every record of the topic by (partition-N, offset), read back from the broker."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    found: dict[tuple[str, str], bytes] = {}
    try:
        for _ in range(200):
            if len(found) >= expected:
                break
            for message in consumer.consume(num_messages=500, timeout=0.2):
                if message.error() is None:
                    found[(f"partition-{message.partition()}", str(message.offset()))] = message.value()
    finally:
        consumer.close()
    return found


def test_producer_against_the_broker_reports_positions_the_broker_holds(kafka_broker, unique_name):
    from lakestack.emulator.kafka import create_topics

    create_topics(kafka_broker, {unique_name: 3})
    env = Environment()
    env.create_local_runner()
    producer = EventHubsProducer.from_config(
        kafka_config(kafka_broker, None), unique_name, fire=env.events.request.fire
    )
    batch = [
        Event(f"id-{n}", "2026-01-01T00:00:00.000000Z", f"k{n % 5}", f"v{n}".encode()) for n in range(60)
    ]

    result = producer.send(batch)

    assert (len(result.acknowledged), result.failed) == (60, [])
    stored = _consume_all(kafka_broker, unique_name, 60)
    assert {(a.shard_id, a.sequence_number): a.event.data for a in result.acknowledged} == stored
    assert env.stats.get("record", "Kafka").num_requests == 60


@pytest.mark.slow
@pytest.mark.e2e
def test_event_hubs_locust_user_sends_exactly_the_budget_to_the_broker(kafka_broker, unique_name, tmp_path):
    from lakestack.emulator.kafka import create_topics

    create_topics(kafka_broker, {unique_name: 4})
    run = LocustRun(
        stream=unique_name,
        region="",
        endpoint_url=None,
        eventhubs_bootstrap=kafka_broker,
        ledger_dir=str(tmp_path / "ledger"),
        users=2,
        spawn_rate=2,
        run_time="60s",
        max_events=250,
        batch_size=50,
        # Faults off: this test is about delivery; every payload is a valid event with a unique id.
        extra=["--duplicate-rate", "0", "--malformed-rate", "0"],
    )
    done = subprocess.run(
        run.argv(), capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2]
    )

    assert done.returncode == 0, done.stderr[-3000:]
    entries = read_ledger(tmp_path / "ledger")
    assert len(entries) == 250 and len({e.event_id for e in entries}) == 250
    stored = _consume_all(kafka_broker, unique_name, 250)
    assert {(e.shard_id, e.sequence_number) for e in entries} == set(stored)
    assert {json.loads(value)["event_id"] for value in stored.values()} == {e.event_id for e in entries}
