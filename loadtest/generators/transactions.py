"""Card transactions per account, with the fraud pattern injected at a known rate and labelled.

The pattern the ``fraud`` job looks for: on one account, a transaction under 1.00 followed within
60 seconds by one over 500.00. Ordinary transactions are drawn from [1.00, 500.00], so they can never
form the pattern by accident: the labels are exactly the injected large transactions, which makes
precision and recall of the job measurable on every run.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from loadtest.events import Event, iso_utc
from loadtest.generators._base import SeededGenerator, utc_now
from loadtest.partitioning import PartitionStrategy

FRAUD_WINDOW_SECONDS = 60
SMALL_LIMIT = 1.00
LARGE_LIMIT = 500.00


class TransactionsGenerator(SeededGenerator):
    """Card transactions; ``fraud_rate`` is the share of new transactions that start a fraud pattern.

    ``txn_time`` is simulated (it advances 0-500 ms per transaction from the first clock reading) so
    the 60-second window is exact whatever the send rate; ``event_time`` is the wall clock.
    """

    scenario = "transactions"

    def __init__(
        self,
        rng: random.Random,
        *,
        partition: PartitionStrategy = "random",
        clock: Callable[[], datetime] = utc_now,
        fraud_rate: float = 0.01,
        accounts: int = 1000,
    ) -> None:
        super().__init__(rng, partition=partition, clock=clock)
        self._fraud_rate = fraud_rate
        self._accounts = accounts
        self._prefix = f"{rng.getrandbits(24):06x}"
        self._seq = 0
        self._sim_time: datetime | None = None
        # Large halves of injected patterns wait here until simulated time reaches them.
        self._pending: list[tuple[datetime, int, dict[str, Any]]] = []
        self._frauds: list[str] = []

    def _next_id(self) -> str:
        self._seq += 1
        return f"{self._prefix}-{self._seq:08d}"

    def _txn(self, account: str, amount_cents: int, txn_time: datetime) -> dict[str, Any]:
        return {
            "transaction_id": self._next_id(),
            "account_id": account,
            "amount": amount_cents / 100,
            "txn_time": iso_utc(txn_time),
        }

    def next_event(self) -> Event:
        """The next transaction (an ordinary one, the small half of a pattern, or a due large half)."""
        rng = self._rng
        if self._sim_time is None:
            self._sim_time = self._clock()
        if self._pending and self._pending[0][0] <= self._sim_time:
            _, _, txn = heapq.heappop(self._pending)
            self._frauds.append(txn["transaction_id"])
        else:
            self._sim_time += timedelta(milliseconds=rng.randint(0, 500))
            account = f"acct-{rng.randrange(self._accounts):05d}"
            if rng.random() < self._fraud_rate:
                txn = self._txn(account, rng.randint(1, 99), self._sim_time)
                due = self._sim_time + timedelta(seconds=rng.randint(1, FRAUD_WINDOW_SECONDS - 1))
                large = self._txn(account, rng.randint(50_001, 500_000), due)
                heapq.heappush(self._pending, (due, self._seq, large))
            else:
                txn = self._txn(account, rng.randint(100, 50_000), self._sim_time)
        return self._emit(txn, txn["account_id"])

    def ground_truth(self) -> dict[str, Any]:
        """The ids of the fraudulent (large) transactions generated so far, in generation order."""
        return {
            "scenario": self.scenario,
            "events": self._count,
            "fraud_transaction_ids": list(self._frauds),
        }
