from __future__ import annotations

import pytest
from locust.env import Environment

from loadtest.clients.eventhubs import EventHubsProducer, kafka_config
from loadtest.events import Event


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
        ("id-0", "0", "100"),
        ("id-1", "1", "101"),
        ("id-3", "1", "103"),
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


def test_kafka_config_is_accepted_by_confluent_kafka_which_refuses_a_wrong_one():
    kafka = pytest.importorskip("confluent_kafka")
    config = kafka_config("127.0.0.1:1", "Endpoint=sb://ns/;SharedAccessKey=k")
    # Building the client validates every setting name and value; no broker is contacted until a send.
    producer = kafka.Producer({**config, "socket.connection.setup.timeout.ms": 1000})
    assert isinstance(producer, kafka.Producer)
    # The check has teeth: the same settings with one wrong value are refused, naming it.
    with pytest.raises(kafka.KafkaException, match="Unsupported SASL mechanism: PLAN"):
        kafka.Producer({**config, "sasl.mechanism": "PLAN"})
