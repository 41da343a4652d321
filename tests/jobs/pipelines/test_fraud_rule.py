"""The fraud rule as tables of cases: one account's transactions in, the alerts (small id, large id) out."""

from __future__ import annotations

import pytest

from jobs.pipelines._fraud_rule import AccountWindow, Txn, advance, detect, is_large, is_small

S = 1_000_000  # one second in microseconds
T0 = 1_767_225_600 * S  # 2026-01-01T00:00:00Z


def txn(tid: str, amount: float, at_s: float) -> Txn:
    return Txn(T0 + round(at_s * S), tid, amount)


def pairs(alerts) -> list[tuple[str, str]]:
    return [(a.small.transaction_id, a.large.transaction_id) for a in alerts]


@pytest.mark.parametrize(
    ("amount", "small", "large"),
    [
        (0.01, True, False),
        (0.99, True, False),
        (1.00, False, False),
        (1.01, False, False),
        (499.99, False, False),
        (500.00, False, False),
        (500.01, False, True),
    ],
)
def test_thresholds_are_strict(amount, small, large):
    assert (is_small(amount), is_large(amount)) == (small, large)


CASES = {
    "small then large 30 s later": ([("s", 0.50, 0), ("l", 900.00, 30)], [("s", "l")]),
    "large exactly 60 s after the small": ([("s", 0.50, 0), ("l", 900.00, 60)], [("s", "l")]),
    "large 60.000001 s after the small": ([("s", 0.50, 0), ("l", 900.00, 60.000001)], []),
    "large 61 s after the small": ([("s", 0.50, 0), ("l", 900.00, 61)], []),
    "small and large at the same instant": ([("s", 0.50, 5), ("l", 900.00, 5)], [("s", "l")]),
    "large before the small in event time": ([("l", 900.00, 0), ("s", 0.50, 10)], []),
    "exactly 1.00 is not small": ([("s", 1.00, 0), ("l", 900.00, 10)], []),
    "exactly 500.00 is not large": ([("s", 0.99, 0), ("l", 500.00, 10)], []),
    "0.99 then 500.01": ([("s", 0.99, 0), ("l", 500.01, 10)], [("s", "l")]),
    "ordinary transactions only": ([("a", 20.00, 0), ("b", 480.00, 10), ("c", 1.00, 20)], []),
    "several smalls: the latest one is named": (
        [("s1", 0.10, 0), ("s2", 0.20, 10), ("s3", 0.30, 20), ("l", 700.00, 50)],
        [("s3", "l")],
    ),
    "several smalls, the latest after the large": (
        [("s1", 0.10, 0), ("l", 700.00, 30), ("s2", 0.20, 40)],
        [("s1", "l")],
    ),
    "one small, two larges: one alert each": (
        [("s", 0.10, 0), ("l1", 700.00, 20), ("l2", 800.00, 40)],
        [("s", "l1"), ("s", "l2")],
    ),
    "an ordinary transaction in between does not break the pattern": (
        [("s", 0.10, 0), ("o", 50.00, 5), ("l", 700.00, 20)],
        [("s", "l")],
    ),
    "a small older than the window is not picked over none": (
        [("s_old", 0.10, 0), ("o", 50.00, 30), ("l", 700.00, 70)],
        [],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_cases(case):
    rows, expected = CASES[case]
    txns = [txn(*row) for row in rows]
    assert pairs(detect(txns)) == expected
    # Arrival order never changes the verdict of one batch.
    assert pairs(detect(list(reversed(txns)))) == expected


def test_alerts_come_in_event_time_order_of_the_large():
    txns = [txn("s", 0.5, 0), txn("l2", 900, 50), txn("l1", 900, 10)]
    assert pairs(detect(txns)) == [("s", "l1"), ("s", "l2")]


def test_a_large_already_alerted_is_never_alerted_again():
    txns = [txn("s", 0.5, 0), txn("l", 900, 10)]
    assert pairs(detect(txns, already_alerted={"l"})) == []


def test_interleaved_accounts_are_judged_apart():
    # Account A: small at 0 s; account B: large at 10 s. Each alone holds half a pattern.
    account_a = [txn("a-s", 0.5, 0), txn("a-o", 30.0, 20)]
    account_b = [txn("b-o", 40.0, 5), txn("b-l", 900, 10)]
    assert pairs(detect(account_a)) == []
    assert pairs(detect(account_b)) == []
    assert pairs(detect(account_a + account_b)) == [("a-s", "b-l")]  # what one shared state would do


# --- across micro-batches (the state function's view) --------------------------------------------------


def test_small_in_one_batch_large_in_the_next():
    first = advance(AccountWindow(), [txn("s", 0.5, 0)], watermark_us=0)
    assert pairs(first.alerts) == []
    second = advance(first.window, [txn("l", 900, 30)], watermark_us=T0 - 60 * S)
    assert pairs(second.alerts) == [("s", "l")]


def test_large_arriving_before_its_small_within_the_watermark():
    first = advance(AccountWindow(), [txn("l", 900, 30)], watermark_us=0)
    assert pairs(first.alerts) == []
    assert [t.transaction_id for t in first.window.txns] == ["l"]
    # The small is older than the large but newer than the watermark: not late, so it is judged.
    second = advance(first.window, [txn("s", 0.5, 10)], watermark_us=T0 + 5 * S)
    assert pairs(second.alerts) == [("s", "l")]
    assert second.late == []


def test_a_small_behind_the_watermark_is_late_and_not_judged():
    first = advance(AccountWindow(), [txn("l", 900, 30)], watermark_us=0)
    second = advance(first.window, [txn("s", 0.5, 10)], watermark_us=T0 + 10 * S)
    assert pairs(second.alerts) == []
    assert [t.transaction_id for t in second.late] == ["s"]
    assert [t.transaction_id for t in second.on_time] == []


def test_a_large_is_alerted_once_even_when_a_closer_small_arrives_later():
    first = advance(AccountWindow(), [txn("s1", 0.5, 0), txn("l", 900, 30)], watermark_us=0)
    second = advance(first.window, [txn("s2", 0.6, 20)], watermark_us=T0 - 60 * S)
    assert pairs(first.alerts) == [("s1", "l")]
    assert pairs(second.alerts) == []


def test_a_transaction_delivered_twice_is_a_duplicate():
    first = advance(AccountWindow(), [txn("s", 0.5, 0), txn("l", 900, 30)], watermark_us=0)
    second = advance(first.window, [txn("l", 900, 30), txn("o", 10.0, 31)], watermark_us=0)
    assert pairs(second.alerts) == []
    assert [t.transaction_id for t in second.duplicates] == ["l"]
    assert [t.transaction_id for t in second.on_time] == ["o"]


def test_window_keeps_only_what_can_still_pair_and_then_empties():
    first = advance(AccountWindow(), [txn("s", 0.5, 0), txn("o", 20.0, 100)], watermark_us=0)
    assert first.window.expires_at_us() == T0 + 160 * S
    # Watermark at 70 s: the small (0 s) can only pair with a large <= 60 s, which would be late: dropped.
    second = advance(first.window, [], watermark_us=T0 + 70 * S)
    assert [t.transaction_id for t in second.window.txns] == ["o"]
    third = advance(second.window, [], watermark_us=T0 + 161 * S)
    assert third.window.empty
    assert third.window.expires_at_us() is None
