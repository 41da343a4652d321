"""The fraud model artifact: a logistic regression as plain numbers, scored with numpy.

``python -m jobs train-fraud`` fits a scikit-learn pipeline (standard scaler + logistic regression) and
writes its parameters here as JSON: the feature list, scaler mean and scale, coefficients, intercept, the
alert threshold, a version and the metrics on held-out data. Scoring needs numpy only, so the cluster does not
need scikit-learn (nor a pickle whose loading runs code and breaks across scikit-learn versions).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.errors import SettingsError
from jobs.pipelines._fraud_features import FEATURES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from numpy.typing import ArrayLike

FORMAT = "lakestack-fraud-model/1"
# Shipped inside the jobs package, so the cluster gets it with the job's wheel: nothing else to upload.
PACKAGED_MODEL = "fraud_model.json"


@dataclass(frozen=True)
class FraudModel:
    """A trained logistic regression over :data:`~jobs.pipelines._fraud_features.FEATURES`.

    Attributes:
        features: input columns, in coefficient order.
        mean, scale: the standard scaler's parameters, one per feature.
        coefficients, intercept: the logistic regression's parameters (on scaled features).
        threshold: the score at or above which a transaction counts as flagged.
        metrics: measured on held-out data at training time (``roc_auc``, ``precision``, ``recall``, ...).
        training: how the training set was made (events, seed, fraud rate, library versions).
    """

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coefficients: tuple[float, ...]
    intercept: float
    threshold: float = 0.5
    metrics: Mapping[str, float] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sizes = {len(self.features), len(self.mean), len(self.scale), len(self.coefficients)}
        if len(sizes) != 1:
            raise SettingsError(
                f"fraud model: expected one mean, scale and coefficient per feature ({len(self.features)}), "
                f"found {len(self.mean)}, {len(self.scale)} and {len(self.coefficients)}."
            )
        if tuple(self.features) != FEATURES:
            raise SettingsError(
                f"fraud model: expected the features {list(FEATURES)} (what the job computes), found "
                f"{list(self.features)}; retrain it with `python -m jobs train-fraud`."
            )

    @property
    def version(self) -> str:
        """A content hash of the parameters: the same numbers, the same version."""
        numbers = [*self.mean, *self.scale, *self.coefficients, self.intercept, self.threshold]
        digest = hashlib.sha256(json.dumps([list(self.features), numbers]).encode()).hexdigest()
        return f"lr-{digest[:12]}"

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Fraud probability of each row of ``matrix`` (columns in :attr:`features` order)."""
        import numpy as np

        scaled = (np.asarray(matrix, dtype=float) - np.asarray(self.mean)) / np.asarray(self.scale)
        logits = scaled @ np.asarray(self.coefficients) + self.intercept
        return 1.0 / (1.0 + np.exp(-logits))

    def to_json(self) -> str:
        body = {"format": FORMAT, "version": self.version, **asdict(self)}
        return json.dumps(body, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, *, where: str) -> FraudModel:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as error:
            raise SettingsError(
                f"fraud model {where}: expected JSON, found invalid text ({error})."
            ) from None
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            found = body.get("format") if isinstance(body, dict) else type(body).__name__
            raise SettingsError(
                f"fraud model {where}: expected format {FORMAT!r}, found {found!r}; "
                "write one with `python -m jobs train-fraud`."
            )
        try:
            return cls(
                features=tuple(body["features"]),
                mean=tuple(float(v) for v in body["mean"]),
                scale=tuple(float(v) for v in body["scale"]),
                coefficients=tuple(float(v) for v in body["coefficients"]),
                intercept=float(body["intercept"]),
                threshold=float(body.get("threshold", 0.5)),
                metrics=dict(body.get("metrics", {})),
                training=dict(body.get("training", {})),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise SettingsError(f"fraud model {where}: missing or invalid field ({error!r}).") from None


def load_model(path: str | None = None) -> FraudModel:
    """The model at ``path`` (a local path or a URI pyarrow reads: ``s3://``, ``abfss://``...), or the one
    packaged with the jobs (``jobs/pipelines/fraud_model.json``)."""
    if path is None:
        try:
            text = resources.files("jobs.pipelines").joinpath(PACKAGED_MODEL).read_text(encoding="utf-8")
        except OSError:
            raise SettingsError(
                f"fraud model: expected jobs/pipelines/{PACKAGED_MODEL} inside the installed jobs package, found "
                "none (a build that packs only .py files drops it); include it, or pass --model PATH|URI."
            ) from None
        return FraudModel.from_json(text, where=f"jobs/pipelines/{PACKAGED_MODEL} (packaged)")
    try:
        if "://" in path:
            from pyarrow import fs

            filesystem, inner = fs.FileSystem.from_uri(path)
            with filesystem.open_input_stream(inner) as stream:
                text = stream.read().decode("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        raise SettingsError(
            f"--model: expected a model file written by `python -m jobs train-fraud`, could not read {path} "
            f"({getattr(error, 'strerror', None) or error})."
        ) from None
    return FraudModel.from_json(text, where=path)


def scorer(
    model: FraudModel, *, kinds: Sequence[str] = ("txn",)
) -> Callable[[Iterable[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """A ``mapInPandas`` function adding ``fraud_score`` to rows whose ``kind`` is in ``kinds`` (else null).

    Only the model's numbers travel to the executors in the closure: no file to read there.
    """
    features = list(model.features)
    wanted = list(kinds)

    def score(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import numpy as np

        for frame in frames:
            mask = frame["kind"].isin(wanted).to_numpy()
            scores = np.full(len(frame), np.nan)
            if mask.any():
                scores[mask] = model.score(frame.loc[mask, features].to_numpy(dtype=float))
            yield frame.assign(fraud_score=scores)

    return score


def roc_auc(labels: ArrayLike, scores: ArrayLike) -> float | None:
    """Area under the ROC curve (the Mann-Whitney statistic, ties counted half); None without both classes.

    Numpy only, so the report computes it wherever the job runs (scikit-learn's ``roc_auc_score`` agrees).
    """
    import numpy as np

    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=float)
    positives, negatives = int(y.sum()), int((~y).sum())
    if positives == 0 or negatives == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=float)
    sorted_scores = s[order]
    # Average ranks over ties (1-based).
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(average, counts)
    return float((ranks[y].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def precision_recall(labels: ArrayLike, flagged: ArrayLike) -> tuple[float | None, float | None]:
    """Precision and recall of ``flagged`` against ``labels`` (None where undefined: nothing flagged/true)."""
    import numpy as np

    y = np.asarray(labels, dtype=bool)
    f = np.asarray(flagged, dtype=bool)
    true_positives = int((y & f).sum())
    precision = true_positives / int(f.sum()) if f.any() else None
    recall = true_positives / int(y.sum()) if y.any() else None
    return precision, recall
