from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from loadtest.events import Event, iso_utc, seeded_uuid4
from loadtest.partitioning import PartitionStrategy, partition_key


def utc_now() -> datetime:
    return datetime.now(UTC)


def dumps(payload: dict[str, Any]) -> bytes:
    # Compact separators: payload size is what Kinesis meters (1 MiB per record, 1 MB/s per shard).
    return json.dumps(payload, separators=(",", ":")).encode()


class Generator(Protocol):
    """What the users need from a scenario generator."""

    scenario: str

    def next_event(self) -> Event: ...

    def ground_truth(self) -> dict[str, Any]: ...


class SeededGenerator:
    """What every scenario generator holds: its randomness, partition strategy, clock and event count."""

    scenario: str

    def __init__(
        self, rng: random.Random, *, partition: PartitionStrategy, clock: Callable[[], datetime]
    ) -> None:
        self._rng = rng
        self._partition = partition
        self._clock = clock
        self._count = 0

    def _emit(self, body: dict[str, Any], entity_id: str) -> Event:
        """Wrap ``body`` in an event: a seeded event_id, the wall-clock event_time, the scenario's event_type
        (one stream may carry every scenario: pipelines pick theirs by it), the partition key."""
        event_id = seeded_uuid4(self._rng)
        event_time = iso_utc(self._clock())
        payload = {"event_id": event_id, "event_time": event_time, "event_type": self.scenario, **body}
        self._count += 1
        key = partition_key(self._partition, entity_id, self._rng)
        return Event(event_id, event_time, key, dumps(payload))
