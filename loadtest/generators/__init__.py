"""Scenario generators. Each produces :class:`~loadtest.events.Event` objects and knows its ground truth."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from loadtest.errors import OptionError
from loadtest.generators._base import Generator, utc_now
from loadtest.generators.orders import OrdersGenerator
from loadtest.generators.sales import SalesGenerator
from loadtest.generators.transactions import TransactionsGenerator
from loadtest.partitioning import PartitionStrategy

SCENARIOS: tuple[str, ...] = ("sales", "transactions", "orders")

__all__ = [
    "SCENARIOS",
    "Generator",
    "OrdersGenerator",
    "SalesGenerator",
    "TransactionsGenerator",
    "make_generator",
    "utc_now",
]


def make_generator(
    scenario: str,
    *,
    seed: int | None = None,
    partition: PartitionStrategy = "random",
    clock: Callable[[], datetime] = utc_now,
    fraud_rate: float = 0.01,
    out_of_order_rate: float = 0.05,
    duplicate_rate: float = 0.02,
    malformed_rate: float = 0.005,
) -> Generator:
    """Build the generator of ``scenario`` (one of :data:`SCENARIOS`).

    ``duplicate_rate`` is the share of events delivered twice (sales: the same event resent; orders: a
    change delivered again); ``malformed_rate`` the share of malformed sales records.
    """
    rng = random.Random(seed)
    if scenario == "sales":
        return SalesGenerator(
            rng,
            partition=partition,
            clock=clock,
            malformed_rate=malformed_rate,
            duplicate_rate=duplicate_rate,
        )
    if scenario == "transactions":
        return TransactionsGenerator(rng, partition=partition, clock=clock, fraud_rate=fraud_rate)
    if scenario == "orders":
        return OrdersGenerator(
            rng,
            partition=partition,
            clock=clock,
            out_of_order_rate=out_of_order_rate,
            duplicate_rate=duplicate_rate,
        )
    raise OptionError(f"scenario: expected one of {', '.join(SCENARIOS)}, found {scenario!r}.")
