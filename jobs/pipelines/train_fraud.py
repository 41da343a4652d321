"""``python -m jobs train-fraud``: fit the fraud model on a labelled set and write its versioned artifact.

The labelled set is what the scenario's generator writes (``python -m loadtest.generate --scenario
transactions --events N --out DIR``): the transactions as JSON lines and the ground truth naming the
injected frauds. Features come from ``jobs.pipelines._fraud_features``, the code the stream runs.
Training needs scikit-learn (the ``train`` extra); the artifact it writes does not.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.errors import PrerequisiteError, SettingsError
from jobs.pipelines._fraud_features import FEATURES, features_for
from jobs.pipelines._fraud_model import FraudModel, precision_recall
from jobs.pipelines._fraud_rule import Txn

# The model the fraud job scores with by default; it ships with the kit, so a training run never replaces it
# unless asked to (--force).
SHIPPED_MODEL = Path(__file__).with_name("fraud_model.json")


def default_output() -> Path:
    """Where a training run writes its model unless told: a new file under reports/ in the current folder."""
    return Path("reports") / f"fraud-model-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"


@dataclass(frozen=True)
class TrainSettings:
    """Inputs and options of one training run, validated once."""

    events: Path
    truth: Path
    output: Path = field(default_factory=default_output)
    test_share: float = 0.25
    threshold: float = 0.5
    force: bool = False

    def __post_init__(self) -> None:
        for flag, path in (("--events", self.events), ("--truth", self.truth)):
            if not path.is_file():
                raise SettingsError(
                    f"{flag}: expected a file written by `python -m loadtest.generate`, found none at {path}."
                )
        if not 0.0 < self.test_share < 1.0:
            raise SettingsError(f"--test-share: expected a share between 0 and 1, found {self.test_share}.")
        if not 0.0 < self.threshold < 1.0:
            raise SettingsError(
                f"--threshold: expected a probability between 0 and 1, found {self.threshold}."
            )
        if self.output.resolve() == SHIPPED_MODEL.resolve() and not self.force:
            raise SettingsError(
                f"--output: {self.output} is the model shipped with the kit (the fraud job's default --model); "
                "give another path, or pass --force to replace it."
            )
        _check_writable(self.output)


def _check_writable(output: Path) -> None:
    # Checked before training, which takes minutes on a real set: a bad --output is found after it otherwise.
    if output.is_dir():
        raise SettingsError(f"--output: expected a file path for the model, found a directory at {output}.")
    if output.is_file():  # a model to replace
        if not os.access(output, os.W_OK):
            raise SettingsError(
                f"--output: cannot replace {output}: not writable by this user. Give another path."
            )
        return
    existing = next(p for p in output.absolute().parents if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SettingsError(
            f"--output: cannot write the model to {output}: {existing} is "
            f"{'not a directory' if not existing.is_dir() else 'not writable by this user'}. Give another path."
        )


@dataclass(frozen=True)
class LabelledSet:
    """Feature rows in event-time order, their labels and transaction ids."""

    rows: list[tuple[float, float, float, int]]
    labels: list[bool]
    transaction_ids: list[str]


def _parse_time_us(text: str) -> int:
    moment = datetime.fromisoformat(text)
    return round(moment.timestamp() * 1_000_000)


def load_labelled_set(events: Path, truth: Path) -> LabelledSet:
    """Read the generator's events and truth; compute every transaction's features, account by account."""
    try:
        frauds = set(json.loads(truth.read_text(encoding="utf-8"))["fraud_transaction_ids"])
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise SettingsError(
            f"--truth: expected the transactions scenario's truth with 'fraud_transaction_ids', "
            f"could not read {truth} ({error!r})."
        ) from None
    by_account: dict[str, list[Txn]] = defaultdict(list)
    with events.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                event = json.loads(line)
                txn = Txn(
                    _parse_time_us(event["txn_time"]), str(event["transaction_id"]), float(event["amount"])
                )
                by_account[str(event["account_id"])].append(txn)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
                raise SettingsError(
                    f"--events: line {line_no} of {events} is not a transaction event ({error!r})."
                ) from None
    scored: list[tuple[Txn, tuple[float, float, float, int]]] = []
    for txns in by_account.values():
        txns.sort()
        scored.extend(zip(txns, (f.as_row() for f in features_for([], txns)), strict=True))
    scored.sort(key=lambda pair: pair[0])
    return LabelledSet(
        rows=[row for _, row in scored],
        labels=[txn.transaction_id in frauds for txn, _ in scored],
        transaction_ids=[txn.transaction_id for txn, _ in scored],
    )


def train(settings: TrainSettings) -> FraudModel:
    """Fit on the earlier (1 - test_share) of the set in event time, measure on the rest, return the model."""
    try:
        import sklearn
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import average_precision_score, roc_auc_score
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        raise PrerequisiteError(
            "train-fraud needs scikit-learn, which is not installed: pip install -e '.[train]' "
            "(make installs it with every extra)."
        ) from None
    import numpy as np

    data = load_labelled_set(settings.events, settings.truth)
    x = np.asarray(data.rows, dtype=float)
    y = np.asarray(data.labels, dtype=bool)
    split = int(len(x) * (1.0 - settings.test_share))
    if y[:split].sum() == 0 or y[split:].sum() == 0 or split == 0:
        raise SettingsError(
            f"--events: expected frauds in both the training and the test part, found {int(y[:split].sum())} "
            f"and {int(y[split:].sum())} among {len(y):,} transactions; generate more events."
        )
    scaler = StandardScaler().fit(x[:split])
    classifier = LogisticRegression(max_iter=1000, class_weight="balanced").fit(
        scaler.transform(x[:split]), y[:split]
    )
    probabilities = classifier.predict_proba(scaler.transform(x[split:]))[:, 1]
    precision, recall = precision_recall(y[split:], probabilities >= settings.threshold)
    metrics: dict[str, float] = {
        "roc_auc": round(float(roc_auc_score(y[split:], probabilities)), 6),
        "average_precision": round(float(average_precision_score(y[split:], probabilities)), 6),
        "precision": round(precision if precision is not None else 0.0, 6),
        "recall": round(recall if recall is not None else 0.0, 6),
        "test_rows": int(len(x) - split),
        "test_frauds": int(y[split:].sum()),
    }
    training: dict[str, Any] = {
        "events_file": settings.events.name,
        "rows": len(x),
        "frauds": int(y.sum()),
        "train_rows": split,
        "split": "event time: the last test_share of transactions are held out",
        "test_share": settings.test_share,
        "classifier": "StandardScaler + LogisticRegression(max_iter=1000, class_weight=balanced)",
        "scikit_learn": sklearn.__version__,
        "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return FraudModel(
        features=FEATURES,
        mean=tuple(float(v) for v in scaler.mean_),
        scale=tuple(float(v) for v in scaler.scale_),
        coefficients=tuple(float(v) for v in classifier.coef_[0]),
        intercept=float(classifier.intercept_[0]),
        threshold=settings.threshold,
        metrics=metrics,
        training=training,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs train-fraud",
        description=(
            "Train the fraud model on a labelled set from the transactions generator "
            "(python -m loadtest.generate --scenario transactions --events N --out DIR) and write its artifact."
        ),
    )
    parser.add_argument("--events", type=Path, required=True, help="transactions as JSON lines")
    parser.add_argument("--truth", type=Path, required=True, help="the generator's truth-transactions.json")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="PATH",
        help="artifact to write (default: reports/fraud-model-<UTC time>.json); the fraud job reads it with "
        f"--model PATH. Replacing the shipped {SHIPPED_MODEL.name} needs --force",
    )
    parser.add_argument(
        "--force", action="store_true", help="allow --output to replace the model shipped with the kit"
    )
    parser.add_argument(
        "--test-share", type=float, default=0.25, help="held-out share (default: %(default)s)"
    )
    parser.add_argument("--threshold", type=float, default=0.5, help="alert threshold (default: %(default)s)")
    args = parser.parse_args(argv)
    settings = TrainSettings(
        events=args.events,
        truth=args.truth,
        output=args.output or default_output(),
        test_share=args.test_share,
        threshold=args.threshold,
        force=args.force,
    )
    model = train(settings)
    settings.output.parent.mkdir(parents=True, exist_ok=True)
    settings.output.write_text(model.to_json(), encoding="utf-8")
    metrics = model.metrics
    print(
        f"model {model.version}: ROC AUC {metrics['roc_auc']:.4f}, precision {metrics['precision']:.4f} and "
        f"recall {metrics['recall']:.4f} at threshold {model.threshold} on {metrics['test_rows']:,} held-out "
        f"transactions ({metrics['test_frauds']} frauds); features {', '.join(model.features)}; "
        f"written to {settings.output}"
    )
    return 0
