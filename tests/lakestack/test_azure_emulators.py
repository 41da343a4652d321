"""The Azure stand-ins' prerequisites and processes: Node for Azurite, the vendored broker binary."""

from __future__ import annotations

import socket

import pytest

from lakestack.emulator import azurite
from lakestack.emulator.kafka import KafkaBroker, broker_binary, create_topics
from lakestack.emulator.process import free_port
from lakestack.errors import UserError


def test_missing_node_names_what_to_install(monkeypatch):
    monkeypatch.setattr(azurite.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match=r"needs Node.js and npm; not found. install Node.js 20 or newer"):
        azurite.check_node()


def test_an_old_node_is_refused_naming_its_version(monkeypatch):
    monkeypatch.setattr(azurite.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(azurite, "node_major", lambda node: 18)
    with pytest.raises(
        UserError, match=r"Azurite 3\.35\.0 needs Node.js 20 or newer; /usr/bin/node is Node 18"
    ):
        azurite.check_node()


def test_the_installed_lock_pins_azurite_3_35():
    import json

    lock = json.loads((azurite.PACKAGE_DIR / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/azurite"]["version"] == azurite.AZURITE_VERSION == "3.35.0"


def test_the_broker_is_the_vendored_tansu_and_stops_with_its_port_freed(tmp_path):
    assert broker_binary().name == "tansu"
    broker = KafkaBroker.start(log_path=tmp_path / "broker.log", topics={"t": 2})
    port = broker.port
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    broker.close()
    assert broker.process.returncode is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _latest(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The broker's ListOffsets "latest" answer per partition (what Spark's Kafka source plans up to)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    return {tp.partition: future.result(10).offset for tp, future in admin.list_offsets(asked).items()}


def test_the_broker_answers_latest_from_its_newest_batch_so_local_producers_send_one_record_each(
    kafka_broker, unique_name
):
    from confluent_kafka import Producer

    from loadtest.clients.eventhubs import kafka_config

    create_topics(kafka_broker, {unique_name: 1})
    create_topics(kafka_broker, {unique_name: 1})  # an existing topic is left as it is
    batching = Producer({"bootstrap.servers": kafka_broker, "linger.ms": 5_000})
    batching.produce(unique_name, b"a0", partition=0)
    assert batching.flush(10) == 0
    for n in range(1, 6):
        batching.produce(unique_name, f"a{n}".encode(), partition=0)
    assert batching.flush(10) == 0  # one batch: offsets 1..5

    # The quirk: the end of the partition is 6, the broker says the newest batch's base offset + 1.
    assert _latest(kafka_broker, unique_name, 1) == {0: 2}

    # The load generator's local settings: one record per batch, and the answer is exact again.
    local = Producer({**kafka_config(kafka_broker, None), "linger.ms": 5_000})
    for n in range(6, 11):
        local.produce(unique_name, f"b{n}".encode(), partition=0)
    assert local.flush(10) == 0
    assert _latest(kafka_broker, unique_name, 1) == {0: 11}


def test_a_topic_on_a_broker_that_is_not_there_is_one_clear_error():
    from lakestack.errors import EmulatorError

    port = free_port()
    with pytest.raises(EmulatorError, match=rf"the Kafka broker at 127\.0\.0\.1:{port} refused topic 'x': "):
        create_topics(f"127.0.0.1:{port}", {"x": 1})
