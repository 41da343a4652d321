from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from loadtest.errors import OptionError
from loadtest.generators import make_generator


def clock() -> datetime:
    return datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_sales_events_are_seeded_and_carry_the_contract_fields():
    gen = make_generator("sales", seed=42, clock=clock)

    first = gen.next_event()
    second = gen.next_event()

    assert first.event_id == "bdd640fb-0667-4ad1-9c80-317fa3b1799d"
    assert first.event_time == "2026-01-02T03:04:05.678901Z"
    assert first.partition_key == "bc8960a923b8c1e9"
    assert json.loads(first.data) == {
        "event_id": "bdd640fb-0667-4ad1-9c80-317fa3b1799d",
        "event_time": "2026-01-02T03:04:05.678901Z",
        "SalesId": 479341424,
        "ProductName": "Shorts",
        "SalesDateTime": "2026-01-02T03:04:05.678901Z",
        "SalesAmount": 642.96,
    }
    assert json.loads(second.data)["SalesAmount"] == 228.9
    assert gen.ground_truth() == {"scenario": "sales", "events": 2, "total_amount": 871.86}


def test_sales_entity_partitioning_keys_by_product():
    gen = make_generator("sales", seed=42, clock=clock, partition="entity")
    assert gen.next_event().partition_key == "Shorts"


def _rule_matches(transactions: list[dict]) -> set[str]:
    """The fraud rule applied to the emitted transactions: a large one with a small one <= 60 s before."""
    hits = set()
    for large in transactions:
        if large["amount"] <= 500.00:
            continue
        t_large = datetime.fromisoformat(large["txn_time"])
        for small in transactions:
            if small["account_id"] != large["account_id"] or small["amount"] >= 1.00:
                continue
            delta = t_large - datetime.fromisoformat(small["txn_time"])
            if timedelta(0) < delta <= timedelta(seconds=60):
                hits.add(large["transaction_id"])
    return hits


def test_transaction_fraud_labels_match_the_injected_pattern():
    gen = make_generator("transactions", seed=7, clock=clock, fraud_rate=0.1)

    emitted = [json.loads(gen.next_event().data) for _ in range(60)]
    truth = gen.ground_truth()

    assert truth["fraud_transaction_ids"] == ["52e6b4-00000006", "52e6b4-00000004"]
    assert _rule_matches(emitted) == {"52e6b4-00000006", "52e6b4-00000004"}
    small_then_large = [
        (t["transaction_id"], t["amount"], t["txn_time"])
        for t in emitted
        if t["account_id"] in ("acct-00406",)
    ]
    assert small_then_large == [
        ("52e6b4-00000005", 0.29, "2026-01-02T03:04:06.773901Z"),
        ("52e6b4-00000006", 3418.53, "2026-01-02T03:04:09.773901Z"),
    ]


def test_transaction_labels_equal_the_rule_on_a_longer_run():
    gen = make_generator("transactions", seed=11, clock=clock, fraud_rate=0.05)

    emitted = [json.loads(gen.next_event().data) for _ in range(1500)]
    labels = gen.ground_truth()["fraud_transaction_ids"]

    assert len(labels) == 63
    assert set(labels) == _rule_matches(emitted)
    # 68 patterns started; the large halves of the last 5 are not due yet when the run stops.
    assert sum(1 for t in emitted if t["amount"] < 1.00) == 68


def test_orders_expected_state_is_the_order_ts_replay_of_the_events():
    gen = make_generator("orders", seed=3, clock=clock, out_of_order_rate=0.2, duplicate_rate=0.2)

    emitted = [json.loads(gen.next_event().data) for _ in range(12)]
    truth = gen.ground_truth()

    assert [(e["change_id"], e["op"], e["order_id"][-2:]) for e in emitted] == [
        (1, "insert", "01"),
        (2, "insert", "02"),
        (4, "update", "02"),  # delivered before change 3: out of order
        (3, "update", "02"),
        (5, "update", "02"),
        (5, "update", "02"),  # duplicate delivery
        (6, "update", "02"),
        (8, "update", "02"),
        (7, "update", "02"),
        (9, "delete", "02"),
        (9, "delete", "02"),
        (10, "update", "01"),
    ]
    assert (truth["out_of_order"], truth["duplicates"]) == (2, 2)
    assert truth["expected_state"] == [
        {
            "order_id": "3ceb3f-0000001",
            "order_ts": "2026-01-02T03:04:12.260901Z",
            "customer_id": "cust-0066",
            "amount": 434.78,
            "status": "paid",
        }
    ]


def _replay(events: list[dict]) -> list[dict]:
    table: dict[str, dict] = {}
    for change in sorted(events, key=lambda e: e["order_ts"]):
        if change["op"] == "delete":
            table.pop(change["order_id"], None)
        else:
            table[change["order_id"]] = {
                k: change[k] for k in ("order_id", "order_ts", "customer_id", "amount", "status")
            }
    return [table[k] for k in sorted(table)]


def test_orders_expected_state_matches_replay_on_a_longer_run():
    gen = make_generator("orders", seed=5, clock=clock, out_of_order_rate=0.1, duplicate_rate=0.05)

    emitted = [json.loads(gen.next_event().data) for _ in range(2000)]
    truth = gen.ground_truth()

    assert truth["expected_state"] == _replay(emitted)
    assert (len(truth["expected_state"]), truth["out_of_order"], truth["duplicates"]) == (48, 161, 84)
    assert emitted != sorted(emitted, key=lambda e: e["order_ts"])


def test_unknown_scenario_is_refused():
    with pytest.raises(
        OptionError, match=r"scenario: expected one of sales, transactions, orders, found 'clicks'"
    ):
        make_generator("clicks")
