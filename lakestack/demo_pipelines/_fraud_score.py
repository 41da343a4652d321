"""The fraud pipeline's figures against the generator's truth: the rule's confusion counts, latency, the model.

Pure functions over what the job wrote (Arrow tables) and the truth, so every number is table-tested.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Set
from datetime import datetime
from typing import Any

import pyarrow as pa

from jobs.pipelines._fraud_model import precision_recall, roc_auc
from jobs.pipelines._fraud_rule import WINDOW_US, is_small
from lakestack.report import percentile


def _us(moment: datetime) -> int:
    return round(moment.timestamp() * 1_000_000)


def _excused(missed: Set[str], transactions: pa.Table) -> set[str]:
    """Missed frauds that could not be judged: the large was late, or a late small precedes it in the window."""
    rows = transactions.select(["transaction_id", "account_id", "amount", "txn_time", "late"]).to_pylist()
    late_smalls: dict[str, list[int]] = {}
    for row in rows:
        if row["late"] and is_small(row["amount"]):
            late_smalls.setdefault(row["account_id"], []).append(_us(row["txn_time"]))
    excused = set()
    for row in rows:
        if row["transaction_id"] not in missed:
            continue
        at = _us(row["txn_time"])
        if row["late"] or any(at - WINDOW_US <= t <= at for t in late_smalls.get(row["account_id"], [])):
            excused.add(row["transaction_id"])
    return excused


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def silver_figures(acknowledged: Iterable[str], transactions: pa.Table) -> dict[str, int]:
    """Silver ``transactions`` against the acknowledged valid transactions: each must be there exactly once.

    Args:
        acknowledged: event ids of the valid transactions the stream acknowledged (the ledger's key; one
            generated transaction is one event, and a resent event keeps its id).
        transactions: silver, with ``event_id`` and ``transaction_id``.

    Returns:
        ``missing`` (acknowledged, not in silver), ``unexpected`` (in silver, never acknowledged) and
        ``duplicates`` (rows beyond the first per ``transaction_id``, the id the job removes duplicates by).
    """
    expected = Counter(set(acknowledged))
    found = Counter(str(e) for e in transactions.column("event_id").to_pylist())
    per_transaction = Counter(str(t) for t in transactions.column("transaction_id").to_pylist())
    return {
        "missing": sum((expected - Counter(set(found))).values()),
        "duplicates": sum(n - 1 for n in per_transaction.values()),
        "unexpected": sum((Counter(set(found)) - expected).values()),
    }


def rule_figures(
    truth: Set[str], alerts: pa.Table, transactions: pa.Table, alert_commits: Mapping[int, datetime]
) -> dict[str, Any]:
    """The rule's figures: every alert judged against the injected frauds (by large transaction id).

    Args:
        truth: ids of the injected fraudulent (large) transactions.
        alerts: the ``fraud_alerts`` table.
        transactions: the ``transactions`` table (ids, accounts, amounts, times, ``late``, ``event_time``).
        alert_commits: batch id -> commit time of ``fraud_alerts``.
    """
    large_ids = [str(tid) for tid in alerts.column("large_transaction_id").to_pylist()]
    alerted = set(large_ids)
    true_positives = alerted & truth
    false_positives = alerted - truth
    missed = truth - alerted
    excused = _excused(missed, transactions)
    late = sum(1 for flag in transactions.column("late").to_pylist() if flag)
    event_time = dict(
        zip(
            transactions.column("transaction_id").to_pylist(),
            transactions.column("event_time").to_pylist(),
            strict=True,
        )
    )
    latencies = []
    for large, batch in zip(large_ids, alerts.column("batch_id").to_pylist(), strict=True):
        committed = alert_commits.get(int(batch)) if batch is not None else None
        sent = event_time.get(large)
        if large in true_positives and committed is not None and sent is not None:
            latencies.append((committed - sent).total_seconds())
    precision = len(true_positives) / len(alerted) if alerted else None
    recall = len(true_positives) / len(truth) if truth else None
    duplicates = len(large_ids) - len(alerted)
    # Every alert is an injected fraud, once, and every fraud that could be judged was alerted (with nothing
    # late, that is precision and recall 1.0; a run that injected none and alerted none is right too).
    ok = duplicates == 0 and not false_positives and not (missed - excused)
    return {
        "injected": len(truth),
        "alerts": len(large_ids),
        "true_positives": len(true_positives),
        "false_positives": len(false_positives),
        "false_negatives": len(missed),
        "false_negatives_late": len(excused),
        "duplicate_alerts": duplicates,
        "precision": _rounded(precision),
        "recall": _rounded(recall),
        "late": late,
        "detection_latency_p50_s": _rounded(percentile(latencies, 50), 3),
        "detection_latency_p95_s": _rounded(percentile(latencies, 95), 3),
        "ok": ok,
        "false_positive_sample": sorted(false_positives)[:3],
        "false_negative_sample": sorted(missed - excused)[:3],
    }


def model_figures(
    truth: Set[str], transactions: pa.Table, *, threshold: float, version: str
) -> dict[str, Any]:
    """The model's ROC AUC and precision/recall at its threshold, over every scored transaction."""
    ids = transactions.column("transaction_id").to_pylist()
    scores = transactions.column("fraud_score").to_pylist()
    pairs = [(tid in truth, score) for tid, score in zip(ids, scores, strict=True) if score is not None]
    labels = [label for label, _ in pairs]
    values = [score for _, score in pairs]
    precision, recall = precision_recall(labels, [score >= threshold for score in values])
    return {
        "model_version": version,
        "scored": len(pairs),
        "roc_auc": _rounded(roc_auc(labels, values)),
        "threshold": threshold,
        "precision_at_threshold": _rounded(precision),
        "recall_at_threshold": _rounded(recall),
    }
