"""Positions in a Kafka topic and the rules that turn records read into a micro-batch's range. Pure data.

The JSON form is Spark's own Kafka source offset, ``{"<topic>": {"<partition>": <next offset>}}``, so an
offset log reads the same whichever reader wrote it. An end position is only ever derived from records
actually read (the last offset read + 1), never from the broker's reported end offset: Tansu, the local
stand-in broker, under-reports it after multi-record produce batches, and a range planned from it would skip
records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.sources.errors import DataLossError


@dataclass(frozen=True)
class TopicOffsets:
    """Per partition, the offset of the next record to read."""

    topic: str
    positions: Mapping[int, int]

    def to_json(self) -> dict[str, Any]:
        return {self.topic: {str(p): int(o) for p, o in sorted(self.positions.items())}}

    @classmethod
    def from_json(cls, topic: str, data: Mapping[str, Any]) -> TopicOffsets | None:
        """Read Spark's Kafka offset form; None when ``data`` is not an offset of ``topic``."""
        partitions = data.get(topic)
        if not isinstance(partitions, Mapping) or len(data) != 1:
            return None
        try:
            return cls(topic, {int(p): int(o) for p, o in partitions.items()})
        except (TypeError, ValueError):
            return None

    def with_new_partitions(self, starts: Mapping[int, int]) -> TopicOffsets:
        """Add partitions that appeared since (they start at ``starts``); known ones keep their position."""
        merged = dict(starts)
        merged.update(self.positions)
        return TopicOffsets(self.topic, merged)


def partition_cap(max_per_trigger: int, partitions: int) -> int:
    """Records one partition may contribute to a micro-batch so that the batch stays within the total."""
    return max(1, math.ceil(max_per_trigger / max(1, partitions)))


def advance(start: TopicOffsets, last_read: Mapping[int, int]) -> TopicOffsets:
    """The end of a batch: after the last offset read in each partition; unread partitions stay put.

    Raises:
        ValueError: an offset read lies before its partition's start (a reader bug: never plan backwards).
    """
    positions = dict(start.positions)
    for partition, offset in last_read.items():
        begin = positions.get(partition, 0)
        if offset < begin:
            raise ValueError(
                f"topic {start.topic} partition {partition}: read offset {offset} before the start {begin}"
            )
        positions[partition] = offset + 1
    return TopicOffsets(start.topic, positions)


def ranges(start: Mapping[int, int], end: Mapping[int, int]) -> list[tuple[int, int, int]]:
    """``(partition, first offset, end offset exclusive)`` of every partition a batch reads, in order.

    Raises:
        ValueError: an end lies before its start.
    """
    found: list[tuple[int, int, int]] = []
    for partition, until in sorted(end.items()):
        begin = start.get(partition, 0)
        if until < begin:
            raise ValueError(f"partition {partition}: end offset {until} before the start {begin}")
        if until > begin:
            found.append((partition, begin, until))
    return found


def check_retained(topic: str, positions: Mapping[int, int], earliest: Mapping[int, int]) -> list[str]:
    """Partitions whose next record expired (retention) before it was read, as messages; empty when none."""
    return [
        f"topic {topic} partition {partition}: records {position} to {earliest[partition] - 1} expired before "
        "they were read"
        for partition, position in sorted(positions.items())
        if partition in earliest and earliest[partition] > position
    ]


def raise_on_loss(gaps: list[str], *, fail_on_data_loss: bool) -> None:
    """Fail on records lost to retention unless the user opted out (then they are only reported)."""
    if gaps and fail_on_data_loss:
        raise DataLossError(
            f"data loss: {'; '.join(gaps)}. Restart from a new checkpoint or pass --fail-on-data-loss false."
        )
