"""Rebuild ``gateway/routes/classifier.json`` from the labeled prompt set.

    .venv/bin/python scripts/train_route_classifier.py [--data data/routing/prompts.jsonl]
                                                       [--out gateway/routes/classifier.json]

Steps (pure Python, deterministic, about a minute on one core):

1. Read the train split of ``data/routing/prompts.jsonl`` (the test split is never read here).
2. Featurize every prompt with :func:`gateway.routes.features.featurize`, the very function the
   gateway runs, so training and serving cannot drift apart. Keep word and word-pair features
   seen in at least ``--min-df`` prompts; cue-group and shape features are always kept.
3. Logistic regression with L2 penalty ``lambda * |w|^2 / 2`` (bias unpenalised), fitted by
   full-batch Adam (``--epochs``, learning rate 0.05).
4. Five-fold cross-validation on the train split (folds stratified by language and label) picks
   ``lambda`` from ``--lambdas`` by out-of-fold log loss, then the threshold: the highest
   probability whose out-of-fold recall on needs-reasoning prompts is at least
   ``--target-recall`` (default 0.95, a margin above the 0.9 the gateway must reach on held-out
   prompts).
5. Fit on the whole train split, drop weights under 1e-3 in magnitude, round to 4 decimals and
   write the JSON with the data's SHA-256 and the cross-validated figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.routes.classifier import sigmoid  # noqa: E402
from gateway.routes.features import featurize  # noqa: E402

Sample = tuple[list[int], int]


def load(path: Path, split: str) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if row["split"] == split]


def vocabulary(feature_sets: list[set[str]], min_df: int) -> list[str]:
    df = Counter(feature for features in feature_sets for feature in features)
    keep = {f for f, n in df.items() if n >= min_df or f.startswith(("cue:", "shape:"))}
    return sorted(keep)


def encode(feature_sets: list[set[str]], labels: list[int], vocab: list[str]) -> list[Sample]:
    index = {feature: i for i, feature in enumerate(vocab)}
    return [(sorted(index[f] for f in features if f in index), y) for features, y in zip(feature_sets, labels)]


def fit(samples: list[Sample], dim: int, l2: float, epochs: int, lr: float = 0.05) -> tuple[float, list[float]]:
    """Full-batch Adam on the L2-penalised log loss; returns (bias, weights)."""
    w = [0.0] * dim
    m = [0.0] * (dim + 1)
    v = [0.0] * (dim + 1)
    b = 0.0
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for step in range(1, epochs + 1):
        grad = [l2 * wj for wj in w]
        gb = 0.0
        for idx, y in samples:
            g = sigmoid(b + sum(w[j] for j in idx)) - y
            gb += g
            for j in idx:
                grad[j] += g
        grad.append(gb)
        c1, c2 = 1 - beta1**step, 1 - beta2**step
        for j, gj in enumerate(grad):
            m[j] = beta1 * m[j] + (1 - beta1) * gj
            v[j] = beta2 * v[j] + (1 - beta2) * gj * gj
            delta = lr * (m[j] / c1) / (math.sqrt(v[j] / c2) + eps)
            if j < dim:
                w[j] -= delta
            else:
                b -= delta
    return b, w


def predict(model: tuple[float, list[float]], idx: list[int]) -> float:
    b, w = model
    return sigmoid(b + sum(w[j] for j in idx))


def folds(rows: list[dict], k: int) -> list[int]:
    """Fold number of each row, stratified by language and label."""
    groups: dict[tuple[str, bool], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[(row["lang"], row["needs_reasoning"])].append(i)
    fold = [0] * len(rows)
    for members in groups.values():
        for position, i in enumerate(sorted(members, key=lambda i: (rows[i]["category"], rows[i]["id"]))):
            fold[i] = position % k
    return fold


def log_loss(scores: list[float], labels: list[int]) -> float:
    eps = 1e-9
    return -sum(y * math.log(p + eps) + (1 - y) * math.log(1 - p + eps) for p, y in zip(scores, labels)) / len(labels)


def recall_precision(scores: list[float], labels: list[int], threshold: float) -> tuple[float, float]:
    tp = sum(1 for p, y in zip(scores, labels) if p >= threshold and y)
    fp = sum(1 for p, y in zip(scores, labels) if p >= threshold and not y)
    positives = sum(labels)
    return tp / positives if positives else 0.0, tp / (tp + fp) if tp + fp else 0.0


def pick_threshold(scores: list[float], labels: list[int], target: float) -> float:
    """The highest threshold (of the positives' scores) whose recall is at least ``target``."""
    for threshold in sorted({p for p, y in zip(scores, labels) if y}, reverse=True):
        if recall_precision(scores, labels, threshold)[0] >= target:
            return threshold
    return 0.0


def cross_validate(rows: list[dict], sets: list[set[str]], labels: list[int], l2: float, args: argparse.Namespace) -> list[float]:
    fold = folds(rows, args.folds)
    scores = [0.0] * len(rows)
    for k in range(args.folds):
        train = [i for i in range(len(rows)) if fold[i] != k]
        vocab = vocabulary([sets[i] for i in train], args.min_df)
        model = fit(encode([sets[i] for i in train], [labels[i] for i in train], vocab), len(vocab), l2, args.epochs)
        held = [i for i in range(len(rows)) if fold[i] == k]
        for i, (idx, _) in zip(held, encode([sets[i] for i in held], [labels[i] for i in held], vocab)):
            scores[i] = predict(model, idx)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--data", type=Path, default=ROOT / "data/routing/prompts.jsonl")
    parser.add_argument("--out", type=Path, default=ROOT / "gateway/routes/classifier.json")
    parser.add_argument("--lambdas", default="0.1,0.3,1,3")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--min-df", type=int, default=2)
    parser.add_argument("--target-recall", type=float, default=0.95)
    args = parser.parse_args(argv)

    rows = load(args.data, "train")
    sets = [featurize(row["prompt"]) for row in rows]
    labels = [int(row["needs_reasoning"]) for row in rows]
    best: tuple[float, float, list[float]] | None = None
    for l2 in (float(x) for x in args.lambdas.split(",")):
        scores = cross_validate(rows, sets, labels, l2, args)
        loss = log_loss(scores, labels)
        print(f"lambda={l2:g}: out-of-fold log loss {loss:.4f}", file=sys.stderr)
        if best is None or loss < best[0]:
            best = (loss, l2, scores)
    assert best is not None
    loss, l2, scores = best
    threshold = pick_threshold(scores, labels, args.target_recall)
    recall, precision = recall_precision(scores, labels, threshold)

    vocab = vocabulary(sets, args.min_df)
    bias, weights = fit(encode(sets, labels, vocab), len(vocab), l2, args.epochs)
    kept = {f: round(w, 4) for f, w in zip(vocab, weights) if abs(w) >= 1e-3}
    digest = hashlib.sha256(args.data.read_bytes()).hexdigest()
    model = {
        "version": f"lr-{digest[:12]}",
        "data_sha256": digest,
        "train_prompts": len(rows),
        "l2": l2,
        "epochs": args.epochs,
        "min_df": args.min_df,
        "threshold": round(threshold, 4),
        "cross_validation": {"log_loss": round(loss, 4), "recall": round(recall, 4), "precision": round(precision, 4),
                             "target_recall": args.target_recall, "folds": args.folds},
        "bias": round(bias, 4),
        "weights": dict(sorted(kept.items())),
    }
    args.out.write_text(json.dumps(model, ensure_ascii=False, indent=0, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(kept)} weights, lambda={l2:g}, threshold={threshold:.3f}, "
          f"out-of-fold recall {recall:.3f} precision {precision:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
