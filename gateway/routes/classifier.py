"""The needs-reasoning classifier: a sparse logistic regression over prompt features.

``score(text) = sigmoid(bias + sum(weights[f] for f in featurize(text)))`` where
:func:`gateway.routes.features.featurize` yields binary word, word-pair, cue-group and shape
features. Weights live in ``classifier.json`` next to this module (a few thousand features, tens
of kilobytes), trained by ``scripts/train_route_classifier.py`` on the train split of
``data/routing/prompts.jsonl`` (pure Python, no extra dependency; the file records the data's
SHA-256, the L2 strength and threshold chosen by cross-validation, and the cross-validated
figures). Features the model never saw weigh nothing.

``threshold`` is the probability at or above which a prompt counts as needing reasoning; the
training script picks it on out-of-fold scores of the train split for a recall target, never on
the held-out test split. ``[route_selection] classifier_threshold`` may override it.

Cost on the request path: one feature scan plus one dict lookup per feature, about 20-40 us for a
typical prompt (``bench/route_select.py`` prints the measured figure).

Errors: :meth:`ClassifierModel.load` raises ``ValueError`` for a file that is not a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.routes.features import featurize

MODEL_PATH = Path(__file__).with_name("classifier.json")


@dataclass(frozen=True, slots=True)
class ClassifierModel:
    """Trained weights (see the module docstring)."""

    bias: float
    weights: dict[str, float]
    threshold: float
    version: str = ""

    @classmethod
    def load(cls, path: Path | str = MODEL_PATH) -> ClassifierModel:
        """Read a model file written by the training script.

        Raises:
            ValueError: the file is not a classifier model.
        """
        data: Any = orjson.loads(Path(path).read_bytes())
        try:
            return cls(
                bias=float(data["bias"]),
                weights={str(k): float(v) for k, v in data["weights"].items()},
                threshold=float(data["threshold"]),
                version=str(data.get("version", "")),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"{path}: not a route classifier model ({error})") from None

    def logit_of(self, features: set[str]) -> float:
        """``bias`` plus the weights of ``features`` (a set intersection, done in C)."""
        weights = self.weights
        return self.bias + sum(map(weights.__getitem__, weights.keys() & features))

    def logit(self, text: str) -> float:
        """``bias`` plus the weights of the features of ``text``."""
        return self.logit_of(featurize(text))

    def score(self, text: str) -> float:
        """Probability in [0, 1] that ``text`` needs reasoning."""
        return sigmoid(self.logit(text))


def sigmoid(z: float) -> float:
    """The logistic function, safe for large ``|z|``."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
