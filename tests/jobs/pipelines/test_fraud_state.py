"""The state function without Spark: a stand-in GroupState, one account's rows in, output rows and state out."""

from __future__ import annotations

import pandas as pd

from jobs.pipelines._fraud_state import OUTPUT_COLUMNS, detect_frauds, load_window

S = 1_000_000
T0 = 1_767_225_600 * S


class FakeState:
    """What detect_frauds uses of pyspark's GroupState."""

    def __init__(self, value=None, watermark_ms=0, timed_out=False):
        self.getOption = value
        self.hasTimedOut = timed_out
        self.watermark_ms = watermark_ms
        self.timeout_ms = None
        self.removed = False

    def getCurrentWatermarkMs(self):
        return self.watermark_ms

    def update(self, value):
        self.getOption = tuple(value)

    def remove(self):
        self.getOption, self.removed = None, True

    def setTimeoutTimestamp(self, ms):
        self.timeout_ms = ms


def frame(rows):
    return pd.DataFrame(
        {
            "account_id": ["A"] * len(rows),
            "transaction_id": [r[0] for r in rows],
            "amount": [r[1] for r in rows],
            "txn_us": [T0 + r[2] * S for r in rows],
            "event_id": [f"e-{r[0]}" for r in rows],
            "event_time": pd.to_datetime([T0 + r[2] * S for r in rows], unit="us"),
            "shard_id": ["s"] * len(rows),
            "sequence_number": [str(i) for i in range(len(rows))],
        }
    )


def test_one_batch_emits_every_transaction_and_the_alert_and_keeps_the_window():
    state = FakeState()
    (out,) = list(
        detect_frauds(("A",), iter([frame([("s", 0.5, 0), ("l", 900.0, 30), ("o", 20.0, 40)])]), state)
    )
    assert list(out.columns) == list(OUTPUT_COLUMNS)
    txns = out[out["kind"] == "txn"].set_index("transaction_id")
    assert sorted(txns.index) == ["l", "o", "s"]
    assert txns.loc["l", ["seconds_since_previous", "previous_amount", "count_last_minute"]].tolist() == [
        30.0,
        0.5,
        1,
    ]
    assert txns.loc["l", "event_id"] == "e-l"
    (alert,) = out[out["kind"] == "alert"].to_dict("records")
    assert (alert["small_transaction_id"], alert["transaction_id"], alert["small_amount"]) == ("s", "l", 0.5)
    assert (alert["txn_us"], alert["small_txn_us"]) == (T0 + 30 * S, T0)
    assert pd.isna(alert["event_time"]) and pd.isna(alert["late"])
    assert [t.transaction_id for t in load_window(state.getOption).txns] == ["s", "l", "o"]
    assert load_window(state.getOption).alerted == frozenset({"l"})
    assert state.timeout_ms == (T0 + 100 * S) // 1000  # the newest (40 s) plus the 60 s window


def test_a_timeout_removes_an_expired_window_and_emits_nothing():
    state = FakeState(value=(["s"], [0.5], [T0], [False]), watermark_ms=(T0 + 61 * S) // 1000, timed_out=True)
    assert list(detect_frauds(("A",), iter([]), state)) == []
    assert state.removed


def test_late_and_duplicate_rows_are_flagged():
    state = FakeState(value=(["x"], [5.0], [T0 + 200 * S], [False]), watermark_ms=(T0 + 150 * S) // 1000)
    (out,) = list(
        detect_frauds(("A",), iter([frame([("late", 0.5, 100), ("x", 5.0, 200), ("new", 9.0, 210)])]), state)
    )
    kinds = dict(zip(out["transaction_id"], zip(out["kind"], out["late"], strict=True), strict=True))
    assert kinds == {"new": ("txn", False), "late": ("txn", True), "x": ("duplicate", False)}
