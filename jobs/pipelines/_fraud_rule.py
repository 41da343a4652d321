"""The fraud rule, as pure functions: a transaction under 1.00 followed within 60 s by one over 500.00.

Everything here works on one account's transactions, in event time (``txn_time``, integer microseconds so
the window is exact), and knows nothing of Spark: the streaming state function calls it once per account and
micro-batch, and the table tests call it directly.

Choices the rule makes (each is a row in the tests):
- "under 1.00" is ``amount < 1.00`` and "over 500.00" is ``amount > 500.00``: exactly 1.00 and exactly
  500.00 are ordinary.
- "within one minute" is ``0 <= large.time - small.time <= 60 s``: a large exactly 60 s after its small is
  fraud, a large before its small (in event time) is not, whatever order they arrive in.
- One alert per large transaction. When several smalls precede it within the window, the alert names the
  latest of them known when the alert is raised (the one that "is followed by" the large).
- A transaction is judged once both halves have arrived, in whichever order, as long as neither is late:
  at or behind the watermark (Spark's definition), a transaction is not judged at all.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

SMALL_LIMIT = 1.00
LARGE_LIMIT = 500.00
WINDOW_US = 60 * 1_000_000


def is_small(amount: float) -> bool:
    """True for the first half of the pattern: strictly under 1.00."""
    return amount < SMALL_LIMIT


def is_large(amount: float) -> bool:
    """True for the second half of the pattern: strictly over 500.00."""
    return amount > LARGE_LIMIT


@dataclass(frozen=True, slots=True, order=True)
class Txn:
    """One transaction of an account, ordered by event time then id (a total, arrival-independent order)."""

    time_us: int
    transaction_id: str
    amount: float = field(default=0.0, compare=False)


@dataclass(frozen=True, slots=True)
class Alert:
    """A detected pattern: ``small`` followed by ``large`` within the window."""

    small: Txn
    large: Txn


@dataclass(frozen=True)
class AccountWindow:
    """What the rule remembers about one account between micro-batches.

    Attributes:
        txns: the account's on-time transactions still inside the window of the watermark, sorted.
        alerted: ids of the large transactions among ``txns`` that already raised their alert.
    """

    txns: tuple[Txn, ...] = ()
    alerted: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.txns

    def expires_at_us(self, window_us: int = WINDOW_US) -> int | None:
        """Event time after which nothing in the window can pair with a transaction that is not late."""
        return self.txns[-1].time_us + window_us if self.txns else None


@dataclass(frozen=True)
class Step:
    """The outcome of one micro-batch for one account.

    Attributes:
        window: the state to keep (``window.empty``: remove it).
        alerts: new alerts, in event-time order of their large transaction.
        on_time: the arrived transactions the rule judged (duplicates removed), sorted.
        late: the arrived transactions at or behind the watermark, not judged.
        duplicates: arrived transactions whose id the window already holds (or that arrived twice).
    """

    window: AccountWindow
    alerts: list[Alert]
    on_time: list[Txn]
    late: list[Txn]
    duplicates: list[Txn]


def _time_of(txn: Txn) -> int:
    return txn.time_us


def _latest_small_before(ordered: Sequence[Txn], large: Txn, window_us: int) -> Txn | None:
    """The latest small transaction in ``ordered`` with ``large.time - window <= time <= large.time``."""
    # Every transaction up to the large's instant: a small at the same microsecond counts, whatever its id.
    stop = bisect.bisect_right(ordered, large.time_us, key=_time_of)
    for candidate in reversed(ordered[:stop]):
        if candidate.time_us < large.time_us - window_us:
            return None
        if is_small(candidate.amount):
            return candidate
    return None


def detect(
    txns: Iterable[Txn], *, already_alerted: Iterable[str] = (), window_us: int = WINDOW_US
) -> list[Alert]:
    """Every alert the rule raises over one account's transactions (any arrival order).

    Args:
        txns: the account's transactions; their order does not matter.
        already_alerted: ids of large transactions whose alert was raised before (never raised twice).
        window_us: the window, in microseconds (60 s).
    """
    ordered = sorted(txns)
    done = set(already_alerted)
    alerts: list[Alert] = []
    for txn in ordered:
        if not is_large(txn.amount) or txn.transaction_id in done:
            continue
        small = _latest_small_before(ordered, txn, window_us)
        if small is not None:
            alerts.append(Alert(small=small, large=txn))
            done.add(txn.transaction_id)
    return alerts


def advance(
    window: AccountWindow,
    arrived: Iterable[Txn],
    *,
    watermark_us: int,
    window_us: int = WINDOW_US,
) -> Step:
    """Judge one micro-batch of an account's transactions against what the window remembers.

    A transaction at or behind the watermark is late: Spark would drop it, here it is returned in
    ``late`` (the job writes it to silver, flagged, and counts it) and never judged, so the alerts do not
    depend on how far behind a straggler was. The returned window keeps what can still pair with a
    transaction that is not late: everything from ``watermark - window`` on.

    Args:
        window: the account's state before this batch.
        arrived: the transactions of this batch, any order.
        watermark_us: the query's event-time watermark for this batch, microseconds (0 before the first).
        window_us: the pattern's window, microseconds.
    """
    known = {txn.transaction_id for txn in window.txns}
    on_time: list[Txn] = []
    late: list[Txn] = []
    duplicates: list[Txn] = []
    for txn in sorted(arrived):
        if txn.transaction_id in known:
            duplicates.append(txn)
        elif txn.time_us <= watermark_us:
            late.append(txn)
        else:
            known.add(txn.transaction_id)
            on_time.append(txn)
    merged = sorted((*window.txns, *on_time))
    alerts = detect(merged, already_alerted=window.alerted, window_us=window_us)
    horizon = watermark_us - window_us
    kept = tuple(txn for txn in merged if txn.time_us >= horizon)
    kept_ids = {txn.transaction_id for txn in kept}
    alerted = frozenset(
        tid for tid in (*window.alerted, *(a.large.transaction_id for a in alerts)) if tid in kept_ids
    )
    return Step(AccountWindow(kept, alerted), alerts, on_time, late, duplicates)
