"""Sales events: SalesId, ProductName, SalesDateTime, SalesAmount plus event_id and event_time."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from loadtest.events import Event, iso_utc, seeded_uuid4
from loadtest.generators._base import SeededGenerator, dumps, utc_now
from loadtest.partitioning import PartitionStrategy, partition_key

PRODUCTS: tuple[str, ...] = (
    "Bike",
    "Helmet",
    "Gloves",
    "Jersey",
    "Shorts",
    "Bottle",
    "Pump",
    "Lights",
    "Lock",
    "Saddle",
)


class SalesGenerator(SeededGenerator):
    """Sales events; ground truth is simply the count and amount total of what was generated.

    The partition entity is the product name: ``--partition-key entity`` therefore shows hot keys on
    purpose (ten products, each one shard).
    """

    scenario = "sales"

    def __init__(
        self,
        rng: random.Random,
        *,
        partition: PartitionStrategy = "random",
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        super().__init__(rng, partition=partition, clock=clock)
        self._cents = 0

    def next_event(self) -> Event:
        """The next sales event."""
        # Not SeededGenerator._emit: SalesDateTime repeats event_time, so the body needs it first.
        rng = self._rng
        event_id = seeded_uuid4(rng)
        event_time = iso_utc(self._clock())
        product = rng.choice(PRODUCTS)
        cents = rng.randint(100, 250_000)
        payload = {
            "event_id": event_id,
            "event_time": event_time,
            "SalesId": rng.randrange(1, 2**31),
            "ProductName": product,
            "SalesDateTime": event_time,
            "SalesAmount": cents / 100,
        }
        self._count += 1
        self._cents += cents
        key = partition_key(self._partition, product, rng)
        return Event(event_id, event_time, key, dumps(payload))

    def ground_truth(self) -> dict[str, Any]:
        """Counts of what was generated (acknowledgement is the ledger's business)."""
        return {"scenario": self.scenario, "events": self._count, "total_amount": self._cents / 100}
