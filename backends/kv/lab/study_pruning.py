"""The pruning study: each policy at each kept budget, on the long tasks, against the full cache.

[worker env: torch, transformers] Per long task: the prompt minus its last ``tail`` tokens is
prefilled once into a full :class:`~backends.kv.lab.pruning.PrunedCache` (its attention
statistics recorded). For the reference (no pruning) and for every policy and budget, a copy of
that cache is pruned to the budget, the last ``tail`` prompt tokens are teacher-forced in chunks
of ``chunk`` (pruning after each), and ``new_tokens`` greedy tokens answer the question (pruning
after each). Figures per policy and budget, over the tasks:

- ``ppl`` / ``ppl_change``: perplexity of the ``tail`` tokens, and its ratio to the reference's
  minus one;
- ``top1``: share of the ``tail`` positions whose argmax equals the reference's;
- ``first_error``: mean index (within the tail) of the first position whose argmax differs
  (``tail`` when none does), i.e. where in the sequence the errors start;
- ``answers_same`` / ``answers_right``: greedy answers identical to the reference's / judged right;
- ``answer_divergence``: mean first token at which the answer leaves the reference's, and
  ``after_divergence``: the share of answer tokens after that point that still differ (1.0 is the
  cascade: once wrong, never back), against ``top1`` under teacher forcing.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from backends.evalset import is_correct
from backends.kv.lab import engine
from backends.kv.lab.pruning import POLICIES, PrunedCache, continue_and_answer, first_divergence, run_forward

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PruningSettings:
    policies: tuple[str, ...] = POLICIES
    budgets: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    tail: int = 128
    chunk: int = 32
    new_tokens: int = 12


def _one(lab: engine.LabModel, base: PrunedCache, last: torch.Tensor, rest: torch.Tensor, policy: str | None,
         keep: float, s: PruningSettings, eos: int | None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    cache = copy.deepcopy(base)
    cache.policy, cache.keep = policy, keep
    cache.compress(base.seen)
    return continue_and_answer(lab, cache, last, rest, s.chunk, s.new_tokens, eos)


def run_task(lab: engine.LabModel, ids: Sequence[int], answers: Sequence[str], s: PruningSettings,
             progress: Callable[[], None]) -> dict[str, Any]:
    """Every policy and budget on one long prompt; per ``policy@keep`` the raw per-task figures."""
    eos = lab.tokenizer.eos_token_id
    tensor = torch.tensor([list(ids)])
    tail = min(s.tail, tensor.shape[1] // 2)
    base = PrunedCache(None, 1.0)
    last = run_forward(lab, base, tensor[:, :-tail], keep=1)[0, -1]
    rest = tensor[:, -tail:]
    ref_nll, ref_top, ref_answer = _one(lab, base, last, rest, None, 1.0, s, eos)
    progress()
    decode = lab.tokenizer.decode
    out: dict[str, Any] = {"reference": {"nll": ref_nll.tolist(), "answer": decode(ref_answer),
                                         "right": is_correct(decode(ref_answer), tuple(answers))}}
    for policy in s.policies:
        for keep in s.budgets:
            nll, top, answer = _one(lab, base, last, rest, policy, keep, s, eos)
            wrong = (top != ref_top).nonzero()
            div = first_divergence(ref_answer, answer)
            after = ([a != b for a, b in zip(ref_answer[div + 1:], answer[div + 1:])] if div is not None else [])
            out[f"{policy}@{keep:g}"] = {
                "nll": nll.tolist(), "wrong": (top != ref_top).tolist(), "top1": float((top == ref_top).float().mean()),
                "first_error": int(wrong[0]) if len(wrong) else tail, "answer": decode(answer),
                "same": answer == ref_answer, "right": is_correct(decode(answer), tuple(answers)),
                "answer_divergence": div, "after_divergence": sum(after) / len(after) if after else None}
            progress()
    out["reference"]["tail"] = tail
    out["reference"]["tokens"] = len(ids)
    return out


def summarize(tasks: Sequence[dict[str, Any]], s: PruningSettings) -> list[dict[str, Any]]:
    """One row per policy and budget over every task (see the module docstring for the fields)."""
    ref_nll = [x for t in tasks for x in t["reference"]["nll"]]
    ref_ppl = math.exp(sum(ref_nll) / len(ref_nll))
    rows = [{"policy": "full", "keep": 1.0, "ppl": ref_ppl, "ppl_change": 0.0, "top1": 1.0,
             "first_error": float(tasks[0]["reference"]["tail"]) if tasks else 0.0, "answers_same": len(tasks),
             "answers_right": sum(t["reference"]["right"] for t in tasks), "tasks": len(tasks),
             "answer_divergence": None, "after_divergence": None}]
    for policy in s.policies:
        for keep in s.budgets:
            runs = [t[f"{policy}@{keep:g}"] for t in tasks]
            nll = [x for r in runs for x in r["nll"]]
            ppl = math.exp(sum(nll) / len(nll))
            divs = [r["answer_divergence"] for r in runs if r["answer_divergence"] is not None]
            after = [r["after_divergence"] for r in runs if r["after_divergence"] is not None]
            rows.append({"policy": policy, "keep": keep, "ppl": ppl, "ppl_change": ppl / ref_ppl - 1,
                         "top1": sum(r["top1"] for r in runs) / len(runs),
                         "first_error": sum(r["first_error"] for r in runs) / len(runs),
                         "answers_same": sum(r["same"] for r in runs), "answers_right": sum(r["right"] for r in runs),
                         "tasks": len(runs), "answer_divergence": sum(divs) / len(divs) if divs else None,
                         "after_divergence": sum(after) / len(after) if after else None})
    return rows


def error_profile(tasks: Sequence[dict[str, Any]], key: str, buckets: int = 8) -> list[float]:
    """Share of wrong top-1 predictions in each of ``buckets`` equal slices of the tail."""
    counts, wrong = [0] * buckets, [0] * buckets
    for t in tasks:
        flags = t[key]["wrong"]
        for i, flag in enumerate(flags):
            b = min(buckets - 1, i * buckets // len(flags))
            counts[b] += 1
            wrong[b] += bool(flag)
    return [w / c if c else 0.0 for w, c in zip(wrong, counts)]


def run_study(lab: engine.LabModel, long_tasks: Sequence[Any], s: PruningSettings,
              progress: Progress) -> dict[str, Any]:
    """The whole pruning study over ``long_tasks`` (``backends.kv.lab.prompts.LongTask``)."""
    total = len(long_tasks) * (1 + len(s.policies) * len(s.budgets))
    done = [0]

    def tick() -> None:
        done[0] += 1
        progress("pruning", done[0], total)

    tasks = [run_task(lab, lab.tokenizer.encode(t.text), t.answers, s, tick) for t in long_tasks]
    profiles = {f"{p}@{k:g}": error_profile(tasks, f"{p}@{k:g}") for p in s.policies for k in s.budgets[:2]}
    per_task = [{"id": t.id, "tokens": r["reference"]["tokens"], "reference_answer": r["reference"]["answer"],
                 "answers": {k: v["answer"] for k, v in r.items() if k != "reference"},
                 "first_error": {k: v["first_error"] for k, v in r.items() if k != "reference"}}
                for t, r in zip(long_tasks, tasks)]
    return {"settings": {"policies": list(s.policies), "budgets": list(s.budgets), "tail": s.tail, "chunk": s.chunk,
                         "new_tokens": s.new_tokens},
            "summary": summarize(tasks, s), "error_profile": profiles, "tasks": per_task}
