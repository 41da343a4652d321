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

    assert first.event_id == "3eb13b90-4668-4257-bdd6-40fb06671ad1"
    assert first.event_time == "2026-01-02T03:04:05.678901Z"
    assert first.partition_key == "ad3c2d6d1a3d1fa7"
    assert json.loads(first.data) == {
        "event_id": "3eb13b90-4668-4257-bdd6-40fb06671ad1",
        "event_time": "2026-01-02T03:04:05.678901Z",
        "event_type": "sales",
        "SalesId": 1581559893,
        "ProductName": "Jersey",
        "SalesDateTime": "2026-01-02T03:04:05.678901Z",
        "SalesAmount": 366.79,
    }
    assert json.loads(second.data)["SalesAmount"] == 574.14
    assert gen.ground_truth() == {
        "scenario": "sales",
        "events": 2,
        "valid_events": 2,
        "total_amount": 940.93,
        "malformed": {},
        "duplicates": {},
        "by_product_minute": {
            "Helmet|2026-01-02T03:04:00Z": [1, 57414],
            "Jersey|2026-01-02T03:04:00Z": [1, 36679],
        },
    }


def test_sales_without_faults_draw_nothing_for_them():
    gen = make_generator("sales", seed=42, clock=clock, malformed_rate=0, duplicate_rate=0)
    first = gen.next_event()
    assert (first.event_id, json.loads(first.data)["ProductName"], json.loads(first.data)["SalesAmount"]) == (
        "bdd640fb-0667-4ad1-9c80-317fa3b1799d",
        "Shorts",
        642.96,
    )


def test_sales_malformed_records_and_duplicates_are_labelled():
    gen = make_generator("sales", seed=7, clock=clock, malformed_rate=0.1, duplicate_rate=0.1)

    events = [gen.next_event() for _ in range(60)]
    truth = gen.ground_truth()

    assert truth["malformed"] == {
        "7f150524-34b9-45df-9e77-69b10f4205b4": "not_object",
        "c5b2e75a-0acd-4be1-86e4-099030f97058": "missing_field",
        "816bee06-f92e-4339-9cce-a098535b6a43": "wrong_type",
        "8dd63cb9-5685-4624-84fc-d5555daf106d": "not_utf8",
        "16ac4191-a26a-40ae-844f-1574f037afc6": "impossible_value",
    }
    spoiled = {e.event_id: e.data for e in events if e.event_id in truth["malformed"]}
    assert (
        spoiled["7f150524-34b9-45df-9e77-69b10f4205b4"] == b'["7f150524-34b9-45df-9e77-69b10f4205b4", 1121.9]'
    )
    assert "SalesAmount" not in json.loads(spoiled["c5b2e75a-0acd-4be1-86e4-099030f97058"])
    assert json.loads(spoiled["816bee06-f92e-4339-9cce-a098535b6a43"])["SalesAmount"] == "twelve"
    assert json.loads(spoiled["16ac4191-a26a-40ae-844f-1574f037afc6"])["SalesAmount"] < 0
    with pytest.raises(UnicodeDecodeError):
        spoiled["8dd63cb9-5685-4624-84fc-d5555daf106d"].decode()
    # A duplicate is the same event sent again: same id, same bytes.
    ids = [e.event_id for e in events]
    assert {i: ids.count(i) - 1 for i in set(ids) if ids.count(i) > 1} == truth["duplicates"]
    assert sum(truth["duplicates"].values()) == 9
    first_sends = {e.event_id: e for e in reversed(events)}
    valid = [json.loads(e.data) for e in first_sends.values() if e.event_id not in truth["malformed"]]
    assert len(valid) == truth["valid_events"] == 46
    assert sum(round(v["SalesAmount"] * 100) for v in valid) == sum(
        c for _, c in truth["by_product_minute"].values()
    )
    assert sum(n for n, _ in truth["by_product_minute"].values()) == 46


def test_sales_entity_partitioning_keys_by_product():
    gen = make_generator("sales", seed=42, clock=clock, partition="entity")
    assert gen.next_event().partition_key == "Jersey"


def test_every_scenario_names_its_event_type():
    for scenario in ("sales", "transactions", "orders"):
        event = make_generator(scenario, seed=1, clock=clock, malformed_rate=0).next_event()
        assert json.loads(event.data)["event_type"] == scenario


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
