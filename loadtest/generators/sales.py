"""Sales events: SalesId, ProductName, SalesDateTime, SalesAmount plus event_id, event_time and event_type.

Two faults are injected at known rates, and labelled in the ground truth, so the ``sales`` pipeline's
quarantine and de-duplication are checked on every run:

- malformed records (``malformed_rate``, default 0.5%): not UTF-8, not JSON, not an object, no
  ``event_type`` (every pipeline quarantines these: nothing says whose they are), or a sales event with a
  missing field, a field of the wrong type or an impossible value (only the sales pipeline quarantines
  these; to the others they are another scenario's events);
- duplicates (``duplicate_rate``): an event sent before goes out again unchanged, the same ``event_id``,
  as a producer retry after a timeout does.
"""

from __future__ import annotations

import json
import random
from collections import Counter, deque
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
# Malformed kinds nothing can be attributed to (every pipeline quarantines them) ...
UNATTRIBUTABLE: tuple[str, ...] = ("not_utf8", "not_json", "not_object", "no_event_type")
# ... and sales events with a bad field (the sales pipeline quarantines them; the others count them as sales).
BAD_FIELD: tuple[str, ...] = ("missing_field", "wrong_type", "impossible_value")
MALFORMED_KINDS: tuple[str, ...] = UNATTRIBUTABLE + BAD_FIELD
_RECENT = 256


def minute_key(product: str, event_time: str) -> str:
    """``<product>|<minute>``, the ground truth's key of a ``sales_by_product_minute`` row (minute in UTC)."""
    return f"{product}|{event_time[:16]}:00Z"


class SalesGenerator(SeededGenerator):
    """Sales events with labelled malformed records and duplicates.

    Ground truth (``ground_truth()``): ``events`` sent, ``malformed`` (event id -> kind), ``duplicates``
    (event id -> times resent), and over the valid events, each counted once: ``valid_events``,
    ``total_amount`` and ``by_product_minute`` (``"<product>|<minute>" -> [count, cents]``).

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
        malformed_rate: float = 0.005,
        duplicate_rate: float = 0.01,
    ) -> None:
        super().__init__(rng, partition=partition, clock=clock)
        self._malformed_rate = malformed_rate
        self._duplicate_rate = duplicate_rate
        self._valid = 0
        self._cents = 0
        self._by_minute: dict[str, list[int]] = {}
        self._malformed: dict[str, str] = {}
        self._duplicates: Counter[str] = Counter()
        self._recent: deque[Event] = deque(maxlen=_RECENT)

    def next_event(self) -> Event:
        """The next event: a resend of a recent one, a malformed record, or a new sale."""
        # No draw at a zero rate, so a seeded run without faults gives the same events as before they existed.
        if self._recent and self._duplicate_rate and self._rng.random() < self._duplicate_rate:
            event = self._rng.choice(self._recent)
            self._duplicates[event.event_id] += 1
            self._count += 1
            return event
        malformed = bool(self._malformed_rate) and self._rng.random() < self._malformed_rate
        return self._malformed_event() if malformed else self._sale()

    def _body(self) -> tuple[str, str, dict[str, Any], int]:
        # Not SeededGenerator._emit: SalesDateTime repeats event_time, so the body needs it first.
        rng = self._rng
        event_id = seeded_uuid4(rng)
        event_time = iso_utc(self._clock())
        product = rng.choice(PRODUCTS)
        cents = rng.randint(100, 250_000)
        payload = {
            "event_id": event_id,
            "event_time": event_time,
            "event_type": self.scenario,
            "SalesId": rng.randrange(1, 2**31),
            "ProductName": product,
            "SalesDateTime": event_time,
            "SalesAmount": cents / 100,
        }
        return event_id, event_time, payload, cents

    def _sale(self) -> Event:
        event_id, event_time, payload, cents = self._body()
        product = payload["ProductName"]
        self._count += 1
        self._valid += 1
        self._cents += cents
        tally = self._by_minute.setdefault(minute_key(product, event_time), [0, 0])
        tally[0] += 1
        tally[1] += cents
        event = Event(
            event_id, event_time, partition_key(self._partition, product, self._rng), dumps(payload)
        )
        self._recent.append(event)
        return event

    def _malformed_event(self) -> Event:
        event_id, event_time, payload, _ = self._body()
        kind = self._rng.choice(MALFORMED_KINDS)
        data = _spoil(kind, payload)
        self._count += 1
        self._malformed[event_id] = kind
        key = partition_key(self._partition, str(payload["ProductName"]), self._rng)
        return Event(event_id, event_time, key, data)

    def ground_truth(self) -> dict[str, Any]:
        """What was generated; acknowledgement (and so what the lake must hold) is the ledger's business."""
        return {
            "scenario": self.scenario,
            "events": self._count,
            "valid_events": self._valid,
            "total_amount": self._cents / 100,
            "malformed": dict(self._malformed),
            "duplicates": dict(self._duplicates),
            "by_product_minute": {k: list(v) for k, v in sorted(self._by_minute.items())},
        }


def _spoil(kind: str, payload: dict[str, Any]) -> bytes:
    """A sales payload made malformed in the way ``kind`` names."""
    if kind == "not_utf8":
        return b"\xff\xfe" + dumps(payload)[2:]
    if kind == "not_json":
        return dumps(payload)[:-7]
    if kind == "not_object":
        return json.dumps([payload["event_id"], payload["SalesAmount"]]).encode()
    spoiled = dict(payload)
    if kind == "no_event_type":
        del spoiled["event_type"]
    elif kind == "missing_field":
        del spoiled["SalesAmount"]
    elif kind == "wrong_type":
        spoiled["SalesAmount"] = "twelve"
    else:  # impossible_value
        spoiled["SalesAmount"] = -abs(spoiled["SalesAmount"])
    return dumps(spoiled)
