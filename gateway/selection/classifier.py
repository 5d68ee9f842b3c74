"""The needs-reasoning classifier: a sparse logistic regression over request features.

``score = sigmoid(bias + sum(weights[f] for f in request_features(...)))`` where
:func:`gateway.selection.features.request_features` yields binary features of the ask (its words,
word pairs, cue groups and request verb), of the material it supplies, of the context marks and
of the request body (tools, JSON output, output cap). Weights live in ``classifier.json`` next to
this module (a few thousand features, under 200 kB), trained by
``scripts/train_route_classifier.py`` on the train split of ``data/routing/requests.jsonl``
(the file records the data's SHA-256, the L2 strength and threshold chosen by cross-validation
and the cross-validated figures). Features the model never saw weigh nothing.

``threshold`` is the probability at or above which a request counts as needing reasoning; the
training script picks it on out-of-fold scores of the train split (folds grouped by template,
so that a fold's scores come from wordings the model did not see) for a recall target, never on
a test split. ``[route_selection] classifier_threshold`` may override it.

Cost on the request path: one feature scan plus one dict lookup per feature, tens of
microseconds per request (``bench/route_select.py`` prints the measured figure).
:meth:`ClassifierModel.top` names the features that weighed most, for explanations.

Errors: :meth:`ClassifierModel.load` raises ``ValueError`` for a file that is not a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.selection.features import featurize

TOP_FEATURES = 6

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

    def top(self, features: set[str] | frozenset[str], k: int = TOP_FEATURES) -> list[tuple[str, float]]:
        """The ``k`` known ``features`` of largest absolute weight, as ``(feature, weight)``, largest first."""
        weights = self.weights
        known = sorted(weights.keys() & features, key=lambda f: (-abs(weights[f]), f))
        return [(feature, weights[feature]) for feature in known[:k]]

    def logit(self, text: str) -> float:
        """``bias`` plus the weights of the features of ``text`` (a lone user turn)."""
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
