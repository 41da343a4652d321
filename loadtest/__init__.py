"""lakestack's Locust load suite: producers, scenario generators with ground truth, the ledger.

Only light modules are re-exported here: importing Locust monkey-patches the standard library
(gevent), so ``loadtest.users`` and the locustfiles are imported only by Locust processes.
"""

from __future__ import annotations

from loadtest.errors import LoadTestError, OptionError, RecordTooLargeError, StreamNotFoundError
from loadtest.events import Event
from loadtest.generators import SCENARIOS, make_generator
from loadtest.ledger import LedgerEntry, read_ledger
from loadtest.runner import LocustRun

__all__ = [
    "SCENARIOS",
    "Event",
    "LedgerEntry",
    "LoadTestError",
    "LocustRun",
    "OptionError",
    "RecordTooLargeError",
    "StreamNotFoundError",
    "make_generator",
    "read_ledger",
]
