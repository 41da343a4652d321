"""Order CDC events (insert, update, delete) keyed by ``order_id``, ordered by ``order_ts``.

Out-of-order and duplicated deliveries are injected at configurable rates; the generator keeps the
table state that applying the emitted events in ``order_ts`` order gives (latest ``order_ts`` per
key wins, a delete removes the row), which is what the ``orders`` job must end with.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from loadtest.events import Event, iso_utc
from loadtest.generators._base import SeededGenerator, utc_now
from loadtest.partitioning import PartitionStrategy

STATUSES: tuple[str, ...] = ("placed", "paid", "packed", "shipped", "delivered")


class OrdersGenerator(SeededGenerator):
    """CDC events for a rolling pool of open orders.

    Args:
        rng: source of randomness (seed it for reproducible runs).
        partition: partition key strategy; ``entity`` keys by ``order_id``.
        clock: wall clock for ``event_time`` and the start of the simulated ``order_ts`` clock.
        out_of_order_rate: share of changes held back and delivered after the same order's next change.
        duplicate_rate: share of changes delivered twice (a fresh ``event_id``, the same ``change_id``).
        open_orders: size of the pool of orders that receive updates.
    """

    scenario = "orders"

    def __init__(
        self,
        rng: random.Random,
        *,
        partition: PartitionStrategy = "random",
        clock: Callable[[], datetime] = utc_now,
        out_of_order_rate: float = 0.05,
        duplicate_rate: float = 0.02,
        open_orders: int = 50,
    ) -> None:
        super().__init__(rng, partition=partition, clock=clock)
        self._out_of_order_rate = out_of_order_rate
        self._duplicate_rate = duplicate_rate
        self._open_orders = open_orders
        self._prefix = f"{rng.getrandbits(24):06x}"
        self._orders = 0
        self._changes = 0
        self._sim_time: datetime | None = None
        self._open: dict[str, dict[str, Any]] = {}
        self._outbox: list[dict[str, Any]] = []
        self._forced: str | None = None
        # order_id -> (order_ts, row or None for deleted), over emitted changes only.
        self._state: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self._out_of_order = 0
        self._duplicates = 0

    def _tick(self) -> str:
        assert self._sim_time is not None
        # Strictly increasing, so no two changes of one order share an order_ts.
        self._sim_time += timedelta(milliseconds=self._rng.randint(1, 1000))
        return iso_utc(self._sim_time)

    def _new_change(self) -> dict[str, Any]:
        rng = self._rng
        order_id = self._forced
        self._forced = None
        if order_id is None and (
            (len(self._open) < self._open_orders and rng.random() < 0.3) or not self._open
        ):
            self._orders += 1
            order_id = f"{self._prefix}-{self._orders:07d}"
            row = {
                "order_id": order_id,
                "customer_id": f"cust-{rng.randrange(500):04d}",
                "amount": rng.randint(100, 100_000) / 100,
                "status": STATUSES[0],
            }
            self._open[order_id] = row
            op = "insert"
        else:
            if order_id is None:
                order_id = rng.choice(sorted(self._open))
            row = dict(self._open[order_id])
            if rng.random() < 0.15:
                op = "delete"
                del self._open[order_id]
            else:
                op = "update"
                row["status"] = STATUSES[min(STATUSES.index(row["status"]) + 1, len(STATUSES) - 1)]
                row["amount"] = rng.randint(100, 100_000) / 100
                self._open[order_id] = row
        self._changes += 1
        return {"change_id": self._changes, "op": op, "order_ts": self._tick(), **row}

    def _record(self, change: dict[str, Any]) -> None:
        order_id = change["order_id"]
        current = self._state.get(order_id)
        if current is None or change["order_ts"] > current[0]:
            row = (
                None
                if change["op"] == "delete"
                else {k: change[k] for k in ("order_id", "order_ts", "customer_id", "amount", "status")}
            )
            self._state[order_id] = (change["order_ts"], row)

    def next_event(self) -> Event:
        """The next CDC event in delivery order (which is not always ``order_ts`` order)."""
        rng = self._rng
        if self._sim_time is None:
            self._sim_time = self._clock()
        if not self._outbox:
            change = self._new_change()
            if change["op"] != "delete" and rng.random() < self._out_of_order_rate:
                # Hold this change back: the same order's next change goes out first.
                self._forced = change["order_id"]
                newer = self._new_change()
                self._outbox.extend([newer, change])
                self._out_of_order += 1
            else:
                self._outbox.append(change)
            if rng.random() < self._duplicate_rate:
                self._outbox.append(dict(self._outbox[-1]))
                self._duplicates += 1
        change = self._outbox.pop(0)
        self._record(change)
        return self._emit(change, change["order_id"])

    def expected_state(self) -> list[dict[str, Any]]:
        """Rows the orders table must hold after every emitted event is applied, sorted by order_id."""
        return [row for _, (_, row) in sorted(self._state.items()) if row is not None]

    def ground_truth(self) -> dict[str, Any]:
        """Expected final state plus the counts of injected out-of-order and duplicate deliveries."""
        return {
            "scenario": self.scenario,
            "events": self._count,
            "out_of_order": self._out_of_order,
            "duplicates": self._duplicates,
            "expected_state": self.expected_state(),
        }
