"""Rebuild ``gateway/selection/classifier.json`` from the labeled request corpus.

    .venv/bin/python scripts/train_route_classifier.py [--data data/routing/requests.jsonl]
                                                       [--out gateway/selection/classifier.json]

Needs numpy (a development tool: ``.venv/bin/pip install numpy``; the gateway never imports it).
Steps (deterministic, under a minute on one core):

1. Read the ``train`` split of ``data/routing/requests.jsonl`` (the test splits are never read).
2. Featurize every request with :func:`gateway.selection.signals.read_signals`, the very path the
   gateway runs, so training and serving cannot drift apart. Keep features seen in at least
   ``--min-df`` requests made from at least ``--min-sources`` different templates (a feature
   only one wording produces teaches that wording, not the task).
3. Logistic regression with L2 penalty ``lambda * |w|^2 / 2`` (bias unpenalised), fitted by
   full-batch Adam (``--epochs``, learning rate 0.05).
4. Five-fold cross-validation on the train split, folds **grouped by template** (every request
   made from one template sits in one fold, so out-of-fold scores come from unseen wordings),
   picks ``lambda`` from ``--lambdas`` by out-of-fold log loss, then the threshold: the highest
   probability whose out-of-fold recall on needs-reasoning requests is at least
   ``--target-recall`` (default 0.95).
5. Fit on the whole train split, drop weights under 1e-3 in magnitude, round to 4 decimals and
   write the JSON with the data's SHA-256 and the cross-validated figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.protocol.openai import Operation, parse_request  # noqa: E402
from gateway.selection.classifier import ClassifierModel  # noqa: E402
from gateway.selection.signals import read_signals  # noqa: E402

_EMPTY = ClassifierModel(bias=0.0, weights={}, threshold=0.5)


def load(path: Path, splits: tuple[str, ...] = ("train",)) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if row["split"] in splits]


def features_of(body: dict) -> set[str]:
    """The request features the gateway reads of ``body`` (a chat completion request)."""
    request = parse_request(Operation.CHAT, orjson.dumps(body))
    return set(read_signals(request, _EMPTY).features)


def vocabulary(sets: list[set[str]], sources: list[str], min_df: int, min_sources: int) -> list[str]:
    df: dict[str, int] = defaultdict(int)
    seen: dict[str, set[str]] = defaultdict(set)
    for features, source in zip(sets, sources):
        for feature in features:
            df[feature] += 1
            seen[feature].add(source)
    return sorted(f for f, n in df.items() if n >= min_df and len(seen[f]) >= min_sources)


class Sparse:
    """Binary rows over ``vocab`` plus a bias column, as flat column indices (products in O(nonzeros))."""

    def __init__(self, sets: list[set[str]], vocab: list[str]) -> None:
        index = {feature: i for i, feature in enumerate(vocab)}
        self.dim = len(vocab) + 1
        cols, rows = [], []
        for row, features in enumerate(sets):
            picked = sorted(index[f] for f in features if f in index) + [len(vocab)]
            cols += picked
            rows += [row] * len(picked)
        self.cols, self.rows, self.n = np.array(cols), np.array(rows), len(sets)

    def dot(self, w: np.ndarray) -> np.ndarray:
        return np.bincount(self.rows, weights=w[self.cols], minlength=self.n)

    def tdot(self, r: np.ndarray) -> np.ndarray:
        return np.bincount(self.cols, weights=r[self.rows], minlength=self.dim)


def fit(x: Sparse, y: np.ndarray, l2: float, epochs: int, lr: float = 0.05) -> tuple[float, np.ndarray]:
    """Full-batch Adam on the L2-penalised log loss; returns (bias, weights)."""
    w = np.zeros(x.dim)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    penalty = np.full_like(w, l2)
    penalty[-1] = 0.0
    for step in range(1, epochs + 1):
        p = 1.0 / (1.0 + np.exp(-x.dot(w)))
        grad = x.tdot(p - y) + penalty * w
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w -= lr * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return float(w[-1]), w[:-1]


def predict(model: tuple[float, np.ndarray], x: Sparse) -> np.ndarray:
    bias, w = model
    return 1.0 / (1.0 + np.exp(-x.dot(np.append(w, bias))))


def group_folds(sources: list[str], k: int) -> np.ndarray:
    """Fold of each row: a stable hash of its template (``source``), so a template sits in one fold."""
    return np.array([zlib.crc32(source.encode()) % k for source in sources])


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def pick_threshold(p: np.ndarray, y: np.ndarray, target: float) -> float:
    """The highest threshold (of the positives' scores) whose recall is at least ``target``."""
    positives = np.sort(p[y == 1])[::-1]
    need = int(np.ceil(target * len(positives)))
    return float(positives[max(0, need - 1)]) if len(positives) else 0.5


def out_of_fold(sets: list[set[str]], sources: list[str], y: np.ndarray, l2: float, args: argparse.Namespace) -> np.ndarray:
    fold = group_folds(sources, args.folds)
    scores = np.zeros(len(sets))
    for k in range(args.folds):
        train = np.flatnonzero(fold != k)
        held = np.flatnonzero(fold == k)
        vocab = vocabulary([sets[i] for i in train], [sources[i] for i in train], args.min_df, args.min_sources)
        model = fit(Sparse([sets[i] for i in train], vocab), y[train], l2, args.epochs)
        scores[held] = predict(model, Sparse([sets[i] for i in held], vocab))
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--data", type=Path, default=ROOT / "data/routing/requests.jsonl")
    parser.add_argument("--out", type=Path, default=ROOT / "gateway/selection/classifier.json")
    parser.add_argument("--lambdas", default="0.3,1,3,10")
    parser.add_argument("--epochs", type=int, default=400)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--min-df", type=int, default=3)
    parser.add_argument("--min-sources", type=int, default=2)
    parser.add_argument("--target-recall", type=float, default=0.95)
    args = parser.parse_args(argv)

    rows = load(args.data)
    sets = [features_of(row["request"]) for row in rows]
    sources = [row["source"] if row["source"] != "seed" else f"seed/{row['task']}" for row in rows]
    y = np.array([float(row["needs_reasoning"]) for row in rows])
    best: tuple[float, float, np.ndarray] | None = None
    for l2 in (float(x) for x in args.lambdas.split(",")):
        scores = out_of_fold(sets, sources, y, l2, args)
        loss = log_loss(scores, y)
        print(f"lambda={l2:g}: out-of-fold log loss {loss:.4f}", file=sys.stderr)
        if best is None or loss < best[0]:
            best = (loss, l2, scores)
    assert best is not None
    loss, l2, scores = best
    threshold = pick_threshold(scores, y, args.target_recall)
    chosen = scores >= threshold
    recall = float(chosen[y == 1].mean())
    precision = float(y[chosen].mean()) if chosen.any() else 0.0
    fast_recall = float((~chosen)[y == 0].mean())

    vocab = vocabulary(sets, sources, args.min_df, args.min_sources)
    bias, weights = fit(Sparse(sets, vocab), y, l2, args.epochs)
    kept = {f: round(float(w), 4) for f, w in zip(vocab, weights) if abs(w) >= 1e-3}
    digest = hashlib.sha256(args.data.read_bytes()).hexdigest()
    model = {
        "version": f"lr-{digest[:12]}",
        "data_sha256": digest,
        "train_requests": len(rows),
        "l2": l2,
        "epochs": args.epochs,
        "min_df": args.min_df,
        "min_sources": args.min_sources,
        "threshold": round(threshold, 4),
        "cross_validation": {"log_loss": round(loss, 4), "recall": round(recall, 4), "precision": round(precision, 4),
                             "fast_recall": round(fast_recall, 4), "target_recall": args.target_recall,
                             "folds": args.folds, "grouped_by": "template"},
        "bias": round(bias, 4),
        "weights": dict(sorted(kept.items())),
    }
    args.out.write_text(json.dumps(model, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(kept)} weights, lambda={l2:g}, threshold={threshold:.3f}, out-of-fold recall "
          f"{recall:.3f} precision {precision:.3f} fast recall {fast_recall:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
