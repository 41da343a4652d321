"""Per-account features of a transaction, computed by the same code in training and in the stream.

A transaction's features look only at the account's transactions before it (in event-time order, ties by
id) within the fraud window: what the streaming state holds anyway, so the state does not have to live
longer for the model than for the rule. Training feeds an account's whole history in one call; the stream
feeds it micro-batch by micro-batch with the window it kept; for transactions that arrive in order the two
give the same numbers (tested).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from jobs.pipelines._fraud_rule import WINDOW_US, Txn

# The order the model's coefficients follow; the artifact records it and the job checks it.
FEATURES: tuple[str, ...] = ("amount", "seconds_since_previous", "previous_amount", "count_last_minute")


@dataclass(frozen=True, slots=True)
class Features:
    """The model's inputs for one transaction.

    Attributes:
        amount: the transaction's amount.
        seconds_since_previous: seconds since the account's previous transaction, at most the window (60):
            a previous transaction older than that, or none, reads as the window.
        previous_amount: the previous transaction's amount within the window, else 0.0.
        count_last_minute: the account's transactions in the window before this one.
    """

    amount: float
    seconds_since_previous: float
    previous_amount: float
    count_last_minute: int

    def as_row(self) -> tuple[float, float, float, int]:
        return (self.amount, self.seconds_since_previous, self.previous_amount, self.count_last_minute)


def features_of(ordered: Sequence[Txn], txn: Txn, *, window_us: int = WINDOW_US) -> Features:
    """Features of ``txn`` against ``ordered``, the account's known transactions, sorted (``txn`` may be in it)."""
    position = bisect.bisect_left(ordered, txn)
    start = bisect.bisect_left(ordered, Txn(txn.time_us - window_us, ""))
    count = max(position - start, 0)
    if count == 0:
        return Features(txn.amount, window_us / 1e6, 0.0, 0)
    previous = ordered[position - 1]
    return Features(txn.amount, (txn.time_us - previous.time_us) / 1e6, previous.amount, count)


def features_for(
    known: Sequence[Txn], arrived: Sequence[Txn], *, window_us: int = WINDOW_US
) -> list[Features]:
    """Features of each of ``arrived`` (in its order), against ``known`` plus the arrived themselves.

    Args:
        known: the account's transactions already seen (the stream's window), sorted.
        arrived: the transactions to compute features for.
        window_us: the window, microseconds.
    """
    ordered = sorted((*known, *arrived))
    return [features_of(ordered, txn, window_us=window_us) for txn in arrived]
