from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Protocol

from loadtest.events import Event


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def dumps(payload: dict[str, Any]) -> bytes:
    # Compact separators: payload size is what Kinesis meters (1 MiB per record, 1 MB/s per shard).
    return json.dumps(payload, separators=(",", ":")).encode()


class Generator(Protocol):
    """What the users need from a scenario generator."""

    scenario: str

    def next_event(self) -> Event: ...

    def ground_truth(self) -> dict[str, Any]: ...
