"""The unit every generator produces and every producer sends."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class Event:
    """One generated event, ready to send.

    Attributes:
        event_id: uuid4 string, unique per generated event; the ledger and the reconciliation key on it.
        event_time: ISO-8601 UTC with microseconds and a trailing ``Z``.
        partition_key: Kinesis partition key / Kafka message key.
        data: the UTF-8 JSON payload.
    """

    event_id: str
    event_time: str
    partition_key: str
    data: bytes


def iso_utc(moment: datetime) -> str:
    """Format an aware datetime as ISO-8601 UTC with microseconds and ``Z`` (the ledger's format)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seeded_uuid4(rng: random.Random) -> str:
    """A version-4 UUID drawn from ``rng``, so seeded generators give the same ids every run."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))
