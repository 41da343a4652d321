"""The per-account state function for ``applyInPandasWithState`` (Spark 3.5 and 4.0 alike).

Spark calls :func:`detect_frauds` once per account with that account's rows of the micro-batch, or with no
rows when the account's event-time timeout fired. It hands the rows to the pure rule
(:func:`~jobs.pipelines._fraud_rule.advance`), computes the model's features with the same window, and
returns one row per transaction (``kind`` ``txn``: on time or late; ``duplicate``) and one per alert
(``kind`` ``alert``). The window is the whole state: it is kept in the checkpoint's state store and
expires, through the event-time timeout, once the watermark has passed the newest transaction by the
fraud window, i.e. when no pattern can complete any more.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from jobs.pipelines._fraud_features import FEATURES, features_of
from jobs.pipelines._fraud_rule import WINDOW_US, AccountWindow, Step, Txn, advance

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupState

# PySpark's own serializer concatenates our output with its state frame and pandas warns, once per account
# and batch, about all-null columns (ours: alert rows have no features); the result is what Spark expects.
warnings.filterwarnings(
    "ignore",
    message="The behavior of DataFrame concatenation with empty or all-NA entries",
    category=FutureWarning,
)

# Columns the state function reads. `txn_us` is the event time as integer microseconds: the grouped input
# must NOT carry the watermarked timestamp column itself, or Spark drops late rows before this function sees
# them (silently, for an event-time timeout); without it the function judges lateness with the same
# watermark and writes late rows to silver, flagged and counted.
INPUT_COLUMNS: tuple[str, ...] = (
    "account_id",
    "transaction_id",
    "amount",
    "txn_us",
    "event_id",
    "event_time",
    "shard_id",
    "sequence_number",
)

# Arrays of primitives: the state row is pickled by PySpark and stored by the JVM state store (RocksDB).
STATE_SCHEMA = (
    "transaction_ids array<string>, amounts array<double>, times_us array<bigint>, alerted array<boolean>"
)

# Times leave as integer microseconds (`*_us`) and become timestamps in Spark: converting in pandas would
# cost more per account than the rule itself.
OUTPUT_SCHEMA = (
    "kind string, account_id string, transaction_id string, amount double, txn_us bigint, "
    "event_id string, event_time timestamp, shard_id string, sequence_number string, late boolean, "
    "seconds_since_previous double, previous_amount double, count_last_minute int, "
    "small_transaction_id string, small_amount double, small_txn_us bigint, watermark_us bigint"
)
OUTPUT_COLUMNS: tuple[str, ...] = tuple(part.split()[0] for part in OUTPUT_SCHEMA.split(", "))


def load_window(value: tuple[Any, ...] | None) -> AccountWindow:
    """The rule's window from a state row (``None``: an account seen for the first time)."""
    if value is None:
        return AccountWindow()
    ids, amounts, times, alerted = value
    txns = tuple(Txn(int(t), str(i), float(a)) for i, a, t in zip(ids, amounts, times, strict=True))
    return AccountWindow(txns, frozenset(i for i, done in zip(ids, alerted, strict=True) if done))


def dump_window(window: AccountWindow) -> tuple[list[str], list[float], list[int], list[bool]]:
    """The state row of a window (the inverse of :func:`load_window`)."""
    txns = window.txns
    return (
        [t.transaction_id for t in txns],
        [t.amount for t in txns],
        [t.time_us for t in txns],
        [t.transaction_id in window.alerted for t in txns],
    )


def _save(state: GroupState, window: AccountWindow) -> None:
    expires = window.expires_at_us(WINDOW_US)
    if expires is None:
        state.remove()
        return
    state.update(dump_window(window))
    # Fires once the watermark passes the newest transaction by the window: nothing left can pair then.
    state.setTimeoutTimestamp(expires // 1000)


def _rows(
    account_id: str,
    frame: pd.DataFrame,
    step: Step,
    window: AccountWindow,
    *,
    watermark_us: int,
    row_of: dict[int, int],
) -> pd.DataFrame:
    """The output rows of one account's batch, built column by column (Spark calls this once per account, so
    per-row pandas work is what the job's throughput is made of)."""
    import numpy as np
    import pandas as pd

    judged = [*step.on_time, *step.late]
    picked = [*judged, *step.duplicates]
    rows = [row_of[id(t)] for t in picked]
    alerts = step.alerts
    n_txn, n_alert = len(picked), len(alerts)
    ordered = sorted((*window.txns, *step.on_time))
    features = [features_of(ordered, t).as_row() for t in judged] + [None] * len(step.duplicates)
    no_alert: list[Any] = [None] * n_alert
    no_txn: list[Any] = [None] * n_txn

    def passed(name: str) -> list[Any]:
        values = frame[name].tolist()
        return [values[r] for r in rows] + no_alert

    event_time = frame["event_time"].to_numpy()[rows]
    columns: dict[str, Any] = {
        "kind": ["txn"] * len(judged) + ["duplicate"] * len(step.duplicates) + ["alert"] * n_alert,
        "account_id": [account_id] * (n_txn + n_alert),
        "transaction_id": [t.transaction_id for t in picked] + [a.large.transaction_id for a in alerts],
        "amount": [t.amount for t in picked] + [a.large.amount for a in alerts],
        "txn_us": [t.time_us for t in picked] + [a.large.time_us for a in alerts],
        "event_id": passed("event_id"),
        "event_time": np.concatenate([event_time, np.full(n_alert, np.datetime64("NaT"), event_time.dtype)]),
        "shard_id": passed("shard_id"),
        "sequence_number": passed("sequence_number"),
        "late": [False] * len(step.on_time)
        + [True] * len(step.late)
        + [False] * len(step.duplicates)
        + no_alert,
        "small_transaction_id": no_txn + [a.small.transaction_id for a in alerts],
        "small_amount": no_txn + [a.small.amount for a in alerts],
        "small_txn_us": no_txn + [a.small.time_us for a in alerts],
        "watermark_us": [watermark_us] * (n_txn + n_alert),
    }
    for index, name in enumerate(FEATURES[1:], start=1):
        columns[name] = [f[index] if f else None for f in features] + no_alert
    # A dict in schema order and no `columns=`: pandas then skips a reindex that cost more than the rule.
    return pd.DataFrame({name: columns[name] for name in OUTPUT_COLUMNS})


def detect_frauds(
    key: tuple[Any, ...], frames: Iterable[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """``applyInPandasWithState`` function: judge one account's micro-batch, keep its window, emit rows."""
    import pandas as pd

    window = load_window(state.getOption)
    watermark_us = state.getCurrentWatermarkMs() * 1000
    if state.hasTimedOut:
        _save(state, advance(window, [], watermark_us=watermark_us).window)
        return
    parts = list(frames)
    frame = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    if frame.empty:
        return
    arrived = [
        Txn(int(t), str(i), float(a))
        for i, a, t in zip(
            frame["transaction_id"].tolist(), frame["amount"].tolist(), frame["txn_us"].tolist(), strict=True
        )
    ]
    step = advance(window, arrived, watermark_us=watermark_us)
    row_of = {id(txn): row for row, txn in enumerate(arrived)}
    out = _rows(str(key[0]), frame, step, window, watermark_us=watermark_us, row_of=row_of)
    _save(state, step.window)
    yield out
