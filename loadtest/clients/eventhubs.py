"""An Event Hubs producer over the Kafka protocol (confluent-kafka), reporting like the Kinesis one.

Each batch is produced and flushed; the delivery report of every message decides whether it counts
as acknowledged (partition and offset go to the ledger as shard and sequence number) or failed.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Sequence
from typing import Any

from loadtest.clients._base import (
    Acknowledged,
    EntryFailure,
    OnAcknowledged,
    Producer,
    Rejected,
    RequestFire,
    SendResult,
    record_size,
)
from loadtest.errors import OptionError
from loadtest.events import Event

FLUSH_TIMEOUT_SECONDS = 30.0


SHARD_PREFIX = "partition-"
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def is_loopback_bootstrap(bootstrap: str) -> bool:
    """True when every server of ``bootstrap`` is on this machine (127.0.0.0/8, ::1, localhost)."""
    hosts = [
        server.strip().rpartition(":")[0].strip("[]") for server in bootstrap.split(",") if server.strip()
    ]

    def loopback(host: str) -> bool:
        if host.lower() in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    return bool(hosts) and all(loopback(host) for host in hosts)


def kafka_config(bootstrap: str, connection_string: str | None) -> dict[str, Any]:
    """librdkafka settings for an Event Hubs namespace's Kafka endpoint (SASL PLAIN over TLS).

    Without a connection string the connection is plaintext, which only a broker on this machine (the local
    stand-in for Event Hubs) may get.

    Raises:
        OptionError: no connection string for a broker off this machine.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    if connection_string:
        # Event Hubs takes the literal user name "$ConnectionString" and the connection string as password.
        return {
            **config,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "$ConnectionString",
            "sasl.password": connection_string,
        }
    if not is_loopback_bootstrap(bootstrap):
        raise OptionError(
            f"--eventhubs-bootstrap {bootstrap}: Event Hubs is reached over SASL_SSL with the namespace's "
            "connection string, and none was given. Set LAKESTACK_EVENTHUBS_CONNECTION_STRING (or pass "
            "--eventhubs-connection-string); only a broker on 127.0.0.1 is reached in plaintext."
        )
    # The local stand-in (Tansu 0.6.0, memory storage) answers ListOffsets "latest" with the base offset of a
    # partition's last record batch + 1, and a fetch from inside a batch skips that batch: both are exact only
    # when every batch holds one record. Spark's Kafka source plans from the first and reads with the second,
    # so local producers send one record per batch (Event Hubs keeps librdkafka's batching).
    return {**config, "security.protocol": "PLAINTEXT", "batch.num.messages": 1}


class EventHubsProducer(Producer):
    """Produces events to one Event Hub (Kafka topic) and reports each flush and message to Locust.

    Args:
        producer: a ``confluent_kafka.Producer`` (or a stub with ``produce``/``flush``).
        topic: the Event Hub name.
        fire: ``environment.events.request.fire``; None reports nothing.
    """

    request_type = "Kafka"

    def __init__(self, producer: Any, topic: str, *, fire: RequestFire | None = None) -> None:
        super().__init__(fire=fire)
        self._producer = producer
        self.topic = topic

    @classmethod
    def from_config(
        cls, config: dict[str, Any], topic: str, *, fire: RequestFire | None = None
    ) -> EventHubsProducer:
        """Build on a real ``confluent_kafka.Producer``."""
        from confluent_kafka import Producer as KafkaProducer

        return cls(KafkaProducer(config), topic, fire=fire)

    def _context(self) -> dict[str, str]:
        return {"topic": self.topic}

    def send(self, batch: Sequence[Event], *, on_acknowledged: OnAcknowledged | None = None) -> SendResult:
        """Produce the batch and flush; sort messages into acknowledged and failed by delivery report.

        The Kafka client retries on its own (idempotent producer), so each failure here is final.
        """
        result = SendResult(calls=1)
        length = sum(record_size(e) for e in batch)
        started = time.time()
        t0 = time.perf_counter()
        outcomes: dict[int, tuple[Any, Any]] = {}

        def on_delivery(index: int) -> Callable[[Any, Any], None]:
            def report(err: Any, msg: Any) -> None:
                outcomes[index] = (err, msg)

            return report

        for index, event in enumerate(batch):
            try:
                self._producer.produce(
                    self.topic,
                    value=event.data,
                    key=event.partition_key.encode(),
                    on_delivery=on_delivery(index),
                )
            except BufferError as exc:
                outcomes[index] = (f"local queue full: {exc}", None)
            except Exception as exc:  # KafkaException and friends: report per message, never crash the task
                outcomes[index] = (str(exc), None)
        remaining = self._producer.flush(FLUSH_TIMEOUT_SECONDS)
        elapsed = (time.perf_counter() - t0) * 1000
        self._report(
            "flush",
            started,
            elapsed,
            length,
            EntryFailure(f"{remaining} undelivered after flush") if remaining else None,
        )
        for index, event in enumerate(batch):
            err, msg = outcomes.get(index, ("no delivery report before the flush timeout", None))
            if err is None and msg is not None:
                # The bronze table's names for the position: shard "partition-N", sequence number = offset.
                result.acknowledged.append(
                    Acknowledged(event, f"{SHARD_PREFIX}{msg.partition()}", str(msg.offset()))
                )
                self._report("record", started, elapsed, record_size(event), None)
            else:
                result.failed.append(Rejected(event, "KafkaError", str(err)))
                self._report("record", started, elapsed, record_size(event), EntryFailure(str(err)))
        if on_acknowledged is not None and result.acknowledged:
            on_acknowledged(result.acknowledged)
        return result
