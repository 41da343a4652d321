"""The fraud figures against the truth: confusion counts, late frauds excused, latency, model metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from lakestack.demo_pipelines._fraud_score import model_figures, rule_figures, silver_figures

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UTC_US = pa.timestamp("us", tz="UTC")


def transactions(rows):
    """rows: (id, account, amount, at_s, late, score)."""
    return pa.table(
        {
            "transaction_id": [r[0] for r in rows],
            "account_id": [r[1] for r in rows],
            "amount": [r[2] for r in rows],
            "txn_time": pa.array([T0 + timedelta(seconds=r[3]) for r in rows], UTC_US),
            "event_time": pa.array([T0 + timedelta(seconds=r[3]) for r in rows], UTC_US),
            "late": [r[4] for r in rows],
            "fraud_score": [r[5] for r in rows],
        }
    )


def alerts(rows):
    """rows: (large id, batch id)."""
    return pa.table(
        {"large_transaction_id": [r[0] for r in rows], "batch_id": pa.array([r[1] for r in rows], pa.int64())}
    )


TXNS = transactions(
    [
        ("s1", "A", 0.5, 0, False, 0.01),
        ("l1", "A", 900.0, 10, False, 0.97),
        ("s2", "B", 0.2, 0, False, 0.02),
        ("l2", "B", 800.0, 20, False, 0.60),
        ("o1", "C", 30.0, 5, False, 0.70),
        ("o2", "C", 40.0, 6, False, 0.10),
    ]
)


def test_every_fraud_found_and_nothing_else():
    commits = {0: T0 + timedelta(seconds=12), 1: T0 + timedelta(seconds=25)}
    figures = rule_figures({"l1", "l2"}, alerts([("l1", 0), ("l2", 1)]), TXNS, commits)
    assert {
        k: figures[k] for k in ("injected", "alerts", "true_positives", "false_positives", "false_negatives")
    } == {
        "injected": 2,
        "alerts": 2,
        "true_positives": 2,
        "false_positives": 0,
        "false_negatives": 0,
    }
    assert (figures["precision"], figures["recall"], figures["late"], figures["ok"]) == (1.0, 1.0, 0, True)
    # Latencies: 12 - 10 = 2 s and 25 - 20 = 5 s.
    assert (figures["detection_latency_p50_s"], figures["detection_latency_p95_s"]) == (3.5, 4.85)


def test_a_missed_fraud_and_a_false_alarm_fail_the_run():
    figures = rule_figures({"l1", "l2"}, alerts([("l1", 0), ("o1", 0)]), TXNS, {0: T0})
    assert (figures["true_positives"], figures["false_positives"], figures["false_negatives"]) == (1, 1, 1)
    assert (figures["precision"], figures["recall"], figures["ok"]) == (0.5, 0.5, False)
    assert (figures["false_positive_sample"], figures["false_negative_sample"]) == (["o1"], ["l2"])


def test_an_alert_twice_fails_the_run():
    figures = rule_figures({"l1"}, alerts([("l1", 0), ("l1", 1)]), TXNS, {0: T0, 1: T0})
    assert (figures["alerts"], figures["duplicate_alerts"], figures["ok"]) == (2, 1, False)


def test_a_fraud_whose_small_came_late_is_excused():
    txns = transactions(
        [("s", "A", 0.5, 0, True, 0.0), ("l", "A", 900.0, 30, False, 0.9), ("x", "B", 5.0, 1, True, 0.0)]
    )
    figures = rule_figures({"l"}, alerts([]), txns, {})
    assert (figures["late"], figures["false_negatives"], figures["false_negatives_late"]) == (2, 1, 1)
    assert (figures["recall"], figures["ok"]) == (0.0, True)


def test_a_fraud_missed_without_a_late_reason_is_not_excused_when_others_were_late():
    txns = transactions([("l", "A", 900.0, 30, False, 0.9), ("x", "B", 0.5, 20, True, 0.0)])
    figures = rule_figures({"l"}, alerts([]), txns, {})
    assert (figures["false_negatives_late"], figures["ok"]) == (0, False)


def test_model_figures():
    figures = model_figures({"l1", "l2"}, TXNS, threshold=0.5, version="lr-x")
    # Scores of the frauds (0.97, 0.60) beat every other but o1 (0.70) beats 0.60: 7 of 8 pairs ordered.
    assert figures == {
        "model_version": "lr-x",
        "scored": 6,
        "roc_auc": 0.875,
        "threshold": 0.5,
        "precision_at_threshold": 0.6667,
        "recall_at_threshold": 1.0,
    }


def test_a_run_without_frauds_and_without_alerts_is_ok():
    figures = rule_figures(set(), alerts([]), TXNS, {})
    assert (figures["injected"], figures["alerts"], figures["precision"], figures["recall"]) == (
        0,
        0,
        None,
        None,
    )
    assert figures["ok"] is True


def silver(rows):
    """rows: (event id, transaction id)."""
    return pa.table({"event_id": [r[0] for r in rows], "transaction_id": [r[1] for r in rows]})


def test_silver_holds_every_acknowledged_transaction_once():
    acknowledged = ["e1", "e2", "e3", "e2"]  # e2 was resent: the ledger holds it twice, silver once
    assert silver_figures(acknowledged, silver([("e1", "t1"), ("e2", "t2"), ("e3", "t3")])) == {
        "missing": 0,
        "duplicates": 0,
        "unexpected": 0,
    }


def test_silver_missing_duplicated_and_unexpected_transactions_are_counted():
    acknowledged = ["e1", "e2", "e3", "e4"]
    found = silver(
        [
            ("e1", "t1"),
            ("e1", "t1"),  # the same event twice
            ("e2", "t2"),
            ("e2b", "t2"),  # the same transaction under another event id: a duplicate and never acknowledged
            ("e9", "t9"),  # never acknowledged
        ]
    )
    assert silver_figures(acknowledged, found) == {"missing": 2, "duplicates": 2, "unexpected": 2}
    assert silver_figures([], silver([])) == {"missing": 0, "duplicates": 0, "unexpected": 0}
