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

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from jobs.pipelines._fraud_features import FEATURES, features_of
from jobs.pipelines._fraud_rule import WINDOW_US, AccountWindow, Txn, advance

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupState

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

OUTPUT_SCHEMA = (
    "kind string, account_id string, transaction_id string, amount double, txn_time timestamp, "
    "event_id string, event_time timestamp, shard_id string, sequence_number string, late boolean, "
    "seconds_since_previous double, previous_amount double, count_last_minute int, "
    "small_transaction_id string, small_amount double, small_txn_time timestamp, watermark timestamp"
)
OUTPUT_COLUMNS: tuple[str, ...] = tuple(part.split()[0] for part in OUTPUT_SCHEMA.split(", "))
_PASSED_THROUGH = (
    "account_id",
    "transaction_id",
    "amount",
    "event_id",
    "event_time",
    "shard_id",
    "sequence_number",
)


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


def _timestamps(values_us: list[int | None]) -> pd.Series:
    import pandas as pd

    return pd.Series(pd.to_datetime(pd.Series(values_us, dtype="Int64"), unit="us", utc=True))


def _transaction_rows(
    frame: pd.DataFrame, rows: list[int], kinds: list[str], features: list[tuple[Any, ...]], late: list[bool]
) -> pd.DataFrame:
    import pandas as pd

    picked = frame.iloc[rows].reset_index(drop=True)
    out = pd.DataFrame({name: picked[name] for name in _PASSED_THROUGH})
    out.insert(0, "kind", kinds)
    out["txn_time"] = _timestamps(picked["txn_us"].tolist())
    out["late"] = late
    for index, name in enumerate(FEATURES[1:], start=1):
        out[name] = [f[index] if f else None for f in features]
    return out


def _alert_rows(account_id: str, alerts: list[Any]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {
            "kind": ["alert"] * len(alerts),
            "account_id": [account_id] * len(alerts),
            "transaction_id": [a.large.transaction_id for a in alerts],
            "amount": [a.large.amount for a in alerts],
            "txn_time": _timestamps([a.large.time_us for a in alerts]),
            "small_transaction_id": [a.small.transaction_id for a in alerts],
            "small_amount": [a.small.amount for a in alerts],
            "small_txn_time": _timestamps([a.small.time_us for a in alerts]),
        }
    )


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
    frame = pd.concat(list(frames), ignore_index=True)
    if frame.empty:
        return
    arrived = [
        Txn(int(t), str(i), float(a))
        for i, a, t in zip(frame["transaction_id"], frame["amount"], frame["txn_us"], strict=True)
    ]
    row_of = {id(txn): row for row, txn in enumerate(arrived)}
    step = advance(window, arrived, watermark_us=watermark_us)
    ordered = sorted((*window.txns, *step.on_time))
    judged = [*step.on_time, *step.late]
    rows = [row_of[id(t)] for t in (*judged, *step.duplicates)]
    kinds = ["txn"] * len(judged) + ["duplicate"] * len(step.duplicates)
    features = [features_of(ordered, t).as_row() for t in judged] + [()] * len(step.duplicates)
    late = [False] * len(step.on_time) + [True] * len(step.late) + [False] * len(step.duplicates)
    out = pd.concat(
        [_transaction_rows(frame, rows, kinds, features, late), _alert_rows(str(key[0]), step.alerts)],
        ignore_index=True,
    )
    out["watermark"] = _timestamps([watermark_us] * len(out))
    _save(state, step.window)
    yield out.reindex(columns=list(OUTPUT_COLUMNS))
