"""`auto` on the labeled prompt set: precision, recall and cost against all-reasoning, plus timings.

    .venv/bin/python -m bench.route_select [--config config.example.toml] [--split test]
        [--tokenizer-python ~/.cache/kvgate/worker-venv/bin/python
         --tokenizer ~/.cache/kvgate/models/SmolLM2-135M-Instruct/tokenizer.json] [--json]

For every prompt of the split (default: the held-out ``test`` split, never used in training)
the real request path runs: ``read_signals`` (prompt view, features, classifier) and
``select_auto`` over idle clusters built from the config (its tiers, prices and expected output
tokens). A prompt *routed to reasoning* is one whose primary cluster is of the reasoning tier.

Rows, side by side: ``all-reasoning`` (the baseline every cost is a share of), ``all-fast``,
``length-only`` (prompt length at or above a threshold chosen on the train split for recall
0.9: what length alone can do), ``cue-rules`` (any proof, math, debug, plan or why cue), and
``auto``. Cost of a request on a cluster, USD: ``(input * input_price + output * output_price)
/ 1e6`` at the config's prices, ``input`` the prompt estimate (``routes/prompt.py``), under two
output models:

* ``config``: each cluster's ``expected_output_tokens`` (the figure the gateway itself starts from);
* ``by-label``: reasoning models think longer on hard prompts: on the reasoning tier 3000 output
  tokens for a needs-reasoning prompt and 800 for a light one, on the fast tier 400 and 250
  (a stress case for `auto`: the prompts it must send to reasoning are the costly ones).

Also printed: recall and precision of `auto` per language, the cost of reading the signals per
request (median of 200 runs per prompt, then the median and p90 over prompts; and one 32 KB
prompt), and, with ``--tokenizer-python``, the prompt estimate against a real BPE tokenizer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.keys.pricing import Pricing
from gateway.protocol.openai import Operation, parse_request
from gateway.routes.classifier import ClassifierModel
from gateway.routes.load import ClusterView
from gateway.routes.policy import Limits, PolicyParams, select_auto
from gateway.routes.prompt import MESSAGE_OVERHEAD, view
from gateway.routes.selector import profiles_of
from gateway.routes.signals import RequestSignals, read_signals
from gateway.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/routing/prompts.jsonl"
RULE_CUES = frozenset({"proof", "math", "debug", "plan", "why"})
BY_LABEL_OUTPUT = {("reasoning", True): 3000, ("reasoning", False): 800, ("fast", True): 400, ("fast", False): 250}


@dataclass(frozen=True)
class Prompt:
    row: dict[str, Any]
    request: Any
    signals: RequestSignals
    tokens: int

    @property
    def label(self) -> bool:
        return bool(self.row["needs_reasoning"])


@dataclass(frozen=True)
class Row:
    name: str
    precision: float
    recall: float
    to_reasoning: float
    cost_config: float
    cost_by_label: float


def load_rows(split: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if split == "all" or row["split"] == split]


def request_of(text: str) -> Any:
    return parse_request(Operation.CHAT, orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]}))


def prepare(rows: Sequence[dict[str, Any]], model: ClassifierModel, settings: Any) -> list[Prompt]:
    config = settings.route_selection
    prompts = []
    for row in rows:
        request = request_of(row["prompt"])
        signals = read_signals(request, model, chars_per_token=config.chars_per_token,
                               tool_bias=config.tool_bias, strict_json_bias=config.strict_json_bias)
        prompts.append(Prompt(row, request, signals, signals.prompt_tokens))
    return prompts


def idle_views(settings: Any) -> list[ClusterView]:
    profiles = profiles_of(settings, Pricing.from_settings(settings))
    return [ClusterView(p, base_ttft_s=p.ttft_prior_s, output_tokens=p.expected_output_tokens)
            for p in profiles.values() if p.tier is not None]


def tier_view(views: Sequence[ClusterView], tier: str) -> ClusterView:
    return next(v for v in views if v.tier == tier)


def cost(prompt: Prompt, cluster: ClusterView, by_label: bool) -> float:
    tier = cluster.tier or "fast"
    output = BY_LABEL_OUTPUT[(tier, prompt.label)] if by_label else cluster.output_tokens
    price = cluster.profile.price
    return (prompt.tokens * price.input_per_mtok + output * price.output_per_mtok) / 1e6


def score_row(name: str, prompts: Sequence[Prompt], decide: Callable[[Prompt], bool], views: Sequence[ClusterView]) -> Row:
    r, f = tier_view(views, "reasoning"), tier_view(views, "fast")
    chosen = [decide(p) for p in prompts]
    tp = sum(1 for p, c in zip(prompts, chosen) if c and p.label)
    fp = sum(1 for p, c in zip(prompts, chosen) if c and not p.label)
    positives = sum(1 for p in prompts if p.label)
    costs = []
    for by_label in (False, True):
        base = sum(cost(p, r, by_label) for p in prompts)
        spent = sum(cost(p, r if c else f, by_label) for p, c in zip(prompts, chosen))
        costs.append(spent / base)
    return Row(name, tp / (tp + fp) if tp + fp else 0.0, tp / positives if positives else 0.0,
               sum(chosen) / len(prompts), costs[0], costs[1])


def length_threshold(train: Sequence[dict[str, Any]], recall: float = 0.9) -> int:
    """The largest prompt length whose rule ``len >= t`` keeps ``recall`` on the train split."""
    lengths = sorted((len(row["prompt"]) for row in train if row["needs_reasoning"]), reverse=True)
    return lengths[max(0, int(recall * len(lengths)) - 1)]


def auto_decider(views: Sequence[ClusterView], params: PolicyParams) -> Callable[[Prompt], bool]:
    names = {v.name: v.tier for v in views}

    def decide(prompt: Prompt) -> bool:
        return names[select_auto(prompt.signals, Limits(), list(views), params).clusters[0]] == "reasoning"

    return decide


def time_signals(prompts: Sequence[Prompt], model: ClassifierModel, repeats: int = 200) -> dict[str, float]:
    """Per-request cost of ``read_signals`` (prompt view, features, classifier), microseconds."""
    per_prompt = []
    for prompt in prompts:
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            read_signals(prompt.request, model, tool_bias=0.5, strict_json_bias=-0.5)
            runs.append(time.perf_counter() - started)
        per_prompt.append(statistics.median(runs) * 1e6)
    per_prompt.sort()
    big = request_of(("Summarize the following report. " + prompts[0].row["prompt"] + " ") * 400)
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        read_signals(big, model)
        runs.append(time.perf_counter() - started)
    return {
        "median_us": round(statistics.median(per_prompt), 1),
        "p90_us": round(per_prompt[int(0.9 * (len(per_prompt) - 1))], 1),
        "max_us": round(per_prompt[-1], 1),
        "median_prompt_chars": statistics.median(len(p.row["prompt"]) for p in prompts),
        "big_prompt_chars": len(view(big).text),
        "big_prompt_us": round(statistics.median(runs) * 1e6, 1),
    }


_TOKENIZE = """
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = json.load(sys.stdin)
print(json.dumps([len(tok.encode(t).ids) for t in texts]))
"""


def estimate_accuracy(prompts: Sequence[Prompt], python: str, tokenizer: str) -> dict[str, Any]:
    """The estimate against a real tokenizer (run by another interpreter that has ``tokenizers``)."""
    texts = [p.row["prompt"] for p in prompts]
    out = subprocess.run([python, "-c", _TOKENIZE, tokenizer], input=json.dumps(texts), capture_output=True,
                         text=True, check=True)
    real = json.loads(out.stdout)
    report: dict[str, Any] = {"tokenizer": Path(tokenizer).parent.name}
    for lang in ("en", "id"):
        pairs = [(p, n) for p, n in zip(prompts, real) if p.row["lang"] == lang and n >= 20]
        ratios = sorted(view(p.request).estimate_tokens() / (n + MESSAGE_OVERHEAD) for p, n in pairs)
        report[lang] = {
            "prompts": len(ratios),
            "chars_per_token_median": round(statistics.median(len(p.row["prompt"]) / n for p, n in pairs), 2),
            "estimate/real p10": round(ratios[len(ratios) // 10], 3),
            "estimate/real median": round(statistics.median(ratios), 3),
            "estimate/real min": round(ratios[0], 3),
        }
    return report


def format_rows(rows: Sequence[Row]) -> str:
    lines = [
        "| policy | precision | recall | sent to reasoning | cost vs all-reasoning (config output) "
        "| cost vs all-reasoning (by-label output) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r.name} | {r.precision:.3f} | {r.recall:.3f} | {r.to_reasoning:.1%} | "
                     f"{r.cost_config:.1%} | {r.cost_by_label:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.route_select", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.example.toml")
    parser.add_argument("--split", default="test", choices=("test", "train", "all"))
    parser.add_argument("--tokenizer-python", help="an interpreter with the `tokenizers` package")
    parser.add_argument("--tokenizer", help="a tokenizer.json for --tokenizer-python")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    settings = load_settings(args.config)
    model = ClassifierModel.load()
    threshold = settings.route_selection.classifier_threshold or model.threshold
    params = PolicyParams(threshold=threshold, light_max_output_tokens=settings.route_selection.light_max_output_tokens)
    views = idle_views(settings)
    prompts = prepare(load_rows(args.split), model, settings)
    cut = length_threshold(load_rows("train"))
    auto = auto_decider(views, params)
    rows = [
        score_row("all-reasoning", prompts, lambda p: True, views),
        score_row("all-fast", prompts, lambda p: False, views),
        score_row(f"length-only (>= {cut} chars)", prompts, lambda p: len(p.row["prompt"]) >= cut, views),
        score_row("cue-rules", prompts, lambda p: bool(p.signals.cues & RULE_CUES), views),
        score_row(f"auto (threshold {threshold:.3f})", prompts, auto, views),
    ]
    by_lang = {lang: score_row(f"auto, {lang}", [p for p in prompts if p.row["lang"] == lang], auto, views)
               for lang in ("en", "id")}
    rows.insert(-1, score_row("oracle (the labels)", prompts, lambda p: p.label, views))
    missed = [p.row["id"] for p in prompts if p.label and not auto(p)]
    timing = time_signals(prompts, model, args.repeats)
    report: dict[str, Any] = {
        "split": args.split, "prompts": len(prompts), "needs_reasoning": sum(p.label for p in prompts),
        "model": model.version, "rows": [r.__dict__ for r in rows], "by_language": {k: v.__dict__ for k, v in by_lang.items()},
        "missed": missed, "signals_timing": timing,
    }
    if args.tokenizer_python and args.tokenizer:
        report["estimate"] = estimate_accuracy(prompts, args.tokenizer_python, args.tokenizer)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"split={args.split}: {len(prompts)} prompts, {report['needs_reasoning']} need reasoning; model {model.version}")
    print(format_rows(rows))
    print(format_rows(list(by_lang.values())).split("\n", 2)[2])
    print(f"missed needs-reasoning prompts: {', '.join(missed) or 'none'}")
    print("signals per request:", json.dumps(timing))
    if "estimate" in report:
        print("prompt estimate vs real tokenizer:", json.dumps(report["estimate"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
