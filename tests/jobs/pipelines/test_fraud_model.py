"""Features shared by training and the stream, the model artifact, its scoring, and `train-fraud`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jobs.errors import SettingsError
from jobs.pipelines._fraud_features import FEATURES, features_for
from jobs.pipelines._fraud_model import FraudModel, load_model, precision_recall, roc_auc, scorer
from jobs.pipelines._fraud_rule import Txn

S = 1_000_000


def t(tid, amount, at_s):
    return Txn(round(at_s * S), tid, amount)


def test_features_of_a_short_history():
    txns = [t("a", 10.0, 0), t("b", 0.5, 20), t("c", 900.0, 50), t("d", 30.0, 200)]
    rows = [f.as_row() for f in features_for([], txns)]
    assert rows == [
        (10.0, 60.0, 0.0, 0),  # nothing before: the window (60 s) and 0.0
        (0.5, 20.0, 10.0, 1),
        (900.0, 30.0, 0.5, 2),
        (30.0, 60.0, 0.0, 0),  # the previous one is 150 s back: outside the window
    ]


def test_stream_chunks_give_the_training_features():
    txns = [t(f"x{i}", float(i % 7) + 0.5, i * 13.5) for i in range(40)]
    whole = [f.as_row() for f in features_for([], txns)]
    chunked = []
    for start in range(0, 40, 6):
        known = [x for x in txns[:start] if x.time_us >= txns[start].time_us - 60 * S]  # what the state keeps
        chunked += [f.as_row() for f in features_for(known, txns[start : start + 6])]
    assert chunked == whole


MODEL = FraudModel(
    features=FEATURES,
    mean=(100.0, 30.0, 50.0, 1.0),
    scale=(50.0, 10.0, 25.0, 1.0),
    coefficients=(2.0, -1.0, 0.5, 0.0),
    intercept=-1.0,
)


def test_score_is_the_logistic_of_the_scaled_features():
    # Row 1 scales to (0, 0, 0, 0): logit -1. Row 2 to (2, -1, 2, 1): logit 4 + 1 + 1 - 1 = 5.
    scores = MODEL.score(np.array([[100.0, 30.0, 50.0, 1.0], [200.0, 20.0, 100.0, 2.0]]))
    assert scores.round(6).tolist() == [0.268941, 0.993307]


def test_scorer_scores_transactions_only():
    import pandas as pd

    frame = pd.DataFrame(
        {
            "kind": ["txn", "alert"],
            "amount": [100.0, 900.0],
            "seconds_since_previous": [30.0, None],
            "previous_amount": [50.0, None],
            "count_last_minute": [1, None],
        }
    )
    (out,) = list(scorer(MODEL)(iter([frame])))
    assert out["fraud_score"].round(6).tolist()[0] == 0.268941
    assert np.isnan(out["fraud_score"].tolist()[1])


def test_artifact_round_trips_and_keeps_its_version(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(MODEL.to_json())
    loaded = load_model(str(path))
    assert loaded == MODEL
    assert json.loads(path.read_text())["version"] == MODEL.version == loaded.version


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "expected JSON"),
        ('{"format": "other"}', "expected format 'lakestack-fraud-model/1', found 'other'"),
        ('{"format": "lakestack-fraud-model/1"}', "missing or invalid field"),
    ],
)
def test_a_bad_artifact_is_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SettingsError, match=message) as caught:
        load_model(str(path))
    assert str(path) in str(caught.value)


def test_an_artifact_with_other_features_is_refused():
    with pytest.raises(SettingsError, match="retrain it"):
        FraudModel(features=("amount",), mean=(0.0,), scale=(1.0,), coefficients=(1.0,), intercept=0.0)


def test_the_packaged_artifact_loads_with_its_metrics():
    model = load_model()
    assert model.features == FEATURES
    assert model.version.startswith("lr-")
    assert set(model.metrics) >= {"roc_auc", "precision", "recall"}
    assert model.metrics["roc_auc"] >= 0.99


@pytest.mark.parametrize(
    ("labels", "scores", "expected"),
    [
        ([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], 0.75),
        ([0, 1], [0.2, 0.9], 1.0),
        ([0, 1], [0.9, 0.2], 0.0),
        ([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5], 0.5),
    ],
)
def test_roc_auc(labels, scores, expected):
    from sklearn.metrics import roc_auc_score

    assert roc_auc(labels, scores) == expected
    assert roc_auc_score(labels, scores) == expected


def test_roc_auc_needs_both_classes():
    assert roc_auc([1, 1], [0.2, 0.3]) is None


def test_precision_recall():
    assert precision_recall([1, 1, 0, 0], [1, 0, 1, 0]) == (0.5, 0.5)
    assert precision_recall([0, 0], [0, 0]) == (None, None)


def test_train_fraud_writes_a_versioned_artifact(tmp_path, capsys):
    from jobs.__main__ import main
    from loadtest.generate import generate

    data = generate("transactions", events=30_000, out_dir=tmp_path / "set", seed=3, fraud_rate=0.02)
    out = tmp_path / "model.json"
    argv = [
        "train-fraud",
        "--events",
        str(data.events_path),
        "--truth",
        str(data.truth_path),
        "--output",
        str(out),
    ]
    assert main(argv) == 0
    body = json.loads(out.read_text())
    assert body["features"] == list(FEATURES)
    assert body["training"]["rows"] == 30_000
    assert body["metrics"]["test_rows"] == 7_500
    assert body["metrics"]["roc_auc"] > 0.99
    assert body["version"] in capsys.readouterr().out
    # The same labelled set gives the same parameters, hence the same version.
    first = body["version"]
    assert main(argv) == 0
    assert json.loads(out.read_text())["version"] == first


def test_train_fraud_names_a_missing_file(tmp_path, capsys):
    from jobs.__main__ import main

    assert (
        main(["train-fraud", "--events", str(tmp_path / "none.jsonl"), "--truth", str(tmp_path / "t.json")])
        == 2
    )
    assert "--events: expected a file written by `python -m loadtest.generate`" in capsys.readouterr().err


def test_a_missing_model_file_names_the_flag(tmp_path):
    with pytest.raises(
        SettingsError, match="--model: expected a model file written by `python -m jobs train-fraud`"
    ):
        load_model(str(tmp_path / "none.json"))


def test_a_model_is_read_from_a_uri(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(MODEL.to_json())
    assert load_model(path.as_uri()) == MODEL
