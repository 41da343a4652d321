"""Partition key strategies and the hot-key warning (one Kinesis shard takes 1,000 records/s)."""

from __future__ import annotations

import logging
import random
from typing import Literal

PartitionStrategy = Literal["random", "entity"]
PARTITION_STRATEGIES: tuple[str, ...] = ("random", "entity")
SHARD_RECORDS_PER_SECOND = 1000

logger = logging.getLogger(__name__)


def partition_key(strategy: PartitionStrategy, entity_id: str, rng: random.Random) -> str:
    """The partition key for one event.

    ``random`` spreads load evenly over the shards; ``entity`` keeps one entity's events in order on
    one shard (what the fraud and CDC jobs rely on) at the price of hot keys.
    """
    if strategy == "entity":
        return entity_id
    return f"{rng.getrandbits(64):016x}"


class HotKeyMonitor:
    """Counts records per partition key per wall-clock second and warns once per key over the limit.

    All records of one key land on one shard, so a key above 1,000 records/s is throttled whatever the
    stream's size; the warning names the key so the user can switch to ``--partition-key random``.
    """

    def __init__(self, *, limit_per_second: int = SHARD_RECORDS_PER_SECOND) -> None:
        self._limit = limit_per_second
        self._second = -1
        self._counts: dict[str, int] = {}
        self.hot_keys: set[str] = set()

    def observe(self, key: str, now: float) -> bool:
        """Count one record for ``key`` at time ``now`` (seconds); True the first time the key runs hot."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._counts = {}
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        if count > self._limit and key not in self.hot_keys:
            self.hot_keys.add(key)
            logger.warning(
                "partition key %r took more than %d records in one second: one shard accepts at most "
                "%d records/s, so these records will be throttled. Use --partition-key random or more "
                "distinct entities.",
                key,
                self._limit,
                self._limit,
            )
            return True
        return False
