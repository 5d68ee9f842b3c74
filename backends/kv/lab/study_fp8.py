"""The FP8 study: per-layer numerics of K and V in E4M3 and E5M2, then the model on the FP8 cache.

[worker env: torch, transformers] Splits: scales are calibrated on the calibration split (the
even-numbered eval questions and long tasks of another seed); every figure is measured on the
held-out split (the odd-numbered eval questions and the long tasks).

1. Numerics (per layer, on K, V and Q captured from the unquantized model): relative error of K
   and V and the attention KL divergence, for each variant ``FORMAT/SCALE``: ``bf16``;
   ``e4m3``, ``e5m2`` with ``unit`` scales (vLLM's default 1.0) or scales calibrated per
   ``tensor`` or per ``head``.
2. End to end (the model run on a :class:`~backends.kv.lab.engine.QuantizedCache`): perplexity of
   the last half of each long input and its change against the unquantized cache, top-1
   agreement of the next-token argmax on those positions, greedy answers to the long tasks, and
   greedy answer agreement (identical text, same verdict) on the held-out eval questions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from backends.evalset import EvalItem, is_correct
from backends.kv.lab import engine
from backends.kv.lab.fp8 import attention_kl, quantize_dequantize
from backends.kv.lab.prompts import LongTask
from backends.kv.lab.scales import ScaleCalibrator

SYSTEM_PROMPT = "Answer the question in one short sentence."
"""The system prompt of ``kvgate kv-check`` (``backends.kv.check_run``), so the answers compare."""

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Fp8Settings:
    numeric_variants: tuple[str, ...] = ("bf16", "e4m3/unit", "e4m3/tensor", "e4m3/head",
                                         "e5m2/unit", "e5m2/tensor", "e5m2/head")
    e2e_variants: tuple[str, ...] = ("e4m3/unit", "e4m3/tensor", "e5m2/unit")
    max_new_tokens: int = 24
    long_new_tokens: int = 8
    batch_size: int = 25


def chat_ids(lab: engine.LabModel, question: str) -> list[int]:
    """Token ids of the chat prompt kv-check sends (system prompt + question, generation prompt)."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    ids = lab.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def variant_scales(variant: str, calibrator: ScaleCalibrator, num_layers: int) -> tuple[str, list[Any], list[Any]]:
    """``(format, k_scales, v_scales)`` of a variant name such as ``e4m3/tensor``."""
    fmt, _, mode = variant.partition("/")
    if fmt == "bf16" or mode == "unit":
        return fmt, [1.0] * num_layers, [1.0] * num_layers
    k, v = calibrator.scales(fmt, mode)
    return fmt, k, v


class NumericsTable:
    """Sums for per-layer relative errors and KL, aggregated over prompts."""

    def __init__(self, variants: Sequence[str], num_layers: int) -> None:
        self.variants = list(variants)
        self.sums = {v: torch.zeros(num_layers, 6, dtype=torch.float64) for v in variants}

    def add(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            quantized: dict[str, tuple[torch.Tensor, torch.Tensor]], scaling: float) -> None:
        """Fold in one layer of one prompt; ``quantized[variant] = (k_q, v_q)``."""
        kls = attention_kl(q, k, [quantized[name][0] for name in self.variants], scaling)
        for name, kl in zip(self.variants, kls, strict=True):
            kq, vq = quantized[name]
            row = self.sums[name][layer]
            row[0] += float((k - kq).float().pow(2).sum())
            row[1] += float(k.float().pow(2).sum())
            row[2] += float((v - vq).float().pow(2).sum())
            row[3] += float(v.float().pow(2).sum())
            row[4] += kl * q.shape[2]
            row[5] += q.shape[2]

    def result(self) -> dict[str, list[dict[str, float]]]:
        """Per variant, per layer: ``k_rel_err``, ``v_rel_err``, ``attn_kl`` (nats, mean per query row)."""
        out: dict[str, list[dict[str, float]]] = {}
        for variant, sums in self.sums.items():
            out[variant] = [{"layer": i, "k_rel_err": math.sqrt(r[0] / r[1]) if r[1] else 0.0,
                             "v_rel_err": math.sqrt(r[2] / r[3]) if r[3] else 0.0,
                             "attn_kl": float(r[4] / r[5]) if r[5] else 0.0} for i, r in enumerate(sums.tolist())]
        return out


class NumericsObserver:
    """Folds every layer of a prefill into a :class:`NumericsTable` (padding rows sliced off)."""

    def __init__(self, table: NumericsTable, scales: dict[str, tuple[str, list[Any], list[Any]]],
                 scaling: float) -> None:
        self.table, self.scales, self.scaling = table, scales, scaling

    def __call__(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 probs: torch.Tensor) -> None:
        valid = engine.SESSION.key_valid
        for row in range(query.shape[0]):
            first = int((~valid[row]).sum()) if valid is not None else 0
            q, k, v = query[row:row + 1, :, first:], key[row:row + 1, :, first:], value[row:row + 1, :, first:]
            quantized = {name: (quantize_dequantize(k, fmt, ks[layer]), quantize_dequantize(v, fmt, vs[layer]))
                         for name, (fmt, ks, vs) in self.scales.items()}
            self.table.add(layer, q, k, v, quantized, self.scaling)


def calibrate(lab: engine.LabModel, eval_prompts: Sequence[Sequence[int]], long_prompts: Sequence[Sequence[int]],
              s: Fp8Settings, progress: Progress) -> ScaleCalibrator:
    """K/V ``amax`` per layer and head over the calibration prompts (prefill only, padding excluded)."""
    calibrator = ScaleCalibrator(lab.num_layers, lab.num_kv_heads)

    def observe(layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, probs: torch.Tensor) -> None:
        valid = engine.SESSION.key_valid
        for row in range(key.shape[0]):
            first = int((~valid[row]).sum()) if valid is not None else 0
            calibrator.observe(layer, key[row:row + 1, :, first:], value[row:row + 1, :, first:])

    batches = [eval_prompts[i:i + s.batch_size] for i in range(0, len(eval_prompts), s.batch_size)]
    for n, batch in enumerate([*batches, *[[p] for p in long_prompts]]):
        generate_batch(lab, batch, DynamicCache(), 0, lab.tokenizer.eos_token_id, observe)
        progress("fp8 calibration", n + 1, len(batches) + len(long_prompts))
    return calibrator


def make_cache(variant: str | None, calibrator: ScaleCalibrator, num_layers: int) -> Any:
    """A fresh cache for ``variant`` (None: the unquantized reference, a plain DynamicCache)."""
    if variant is None:
        return DynamicCache()
    return engine.QuantizedCache(*variant_scales(variant, calibrator, num_layers))


def _prefill(lab: engine.LabModel, ids: torch.Tensor, cache: Any, start: Any, observer: Any,
             keep: int = 1) -> torch.Tensor:
    if observer is not None:
        engine.SESSION.observers.append(observer)
    try:
        return engine.forward(lab, ids, cache, start, keep)
    finally:
        if observer is not None:
            engine.SESSION.observers.remove(observer)


def generate_batch(lab: engine.LabModel, prompts: Sequence[Sequence[int]], cache: Any, max_new_tokens: int,
                   eos: int | None, observer: Any = None) -> list[list[int]]:
    """Greedy tokens for left-padded ``prompts`` in one batch (stops at ``eos`` per row).

    ``observer`` (an :data:`engine.Observer`) sees the prefill's attention only.
    """
    width = max(len(p) for p in prompts)
    pad = [width - len(p) for p in prompts]
    ids = torch.tensor([[0] * k + list(p) for k, p in zip(pad, prompts)])
    valid = torch.tensor([[False] * k + [True] * len(p) for k, p in zip(pad, prompts)])
    starts = -torch.tensor(pad)
    out: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    engine.SESSION.key_valid = valid
    try:
        logits = _prefill(lab, ids, cache, starts, observer)
        for step in range(max_new_tokens):
            tokens = logits[:, -1].argmax(-1)
            for row, token in enumerate(tokens.tolist()):
                if not done[row]:
                    out[row].append(token)
                    done[row] = token == eos
            if all(done):
                break
            engine.SESSION.key_valid = torch.cat([engine.SESSION.key_valid, torch.ones(len(prompts), 1, dtype=torch.bool)], 1)
            logits = engine.forward(lab, tokens.view(-1, 1), cache, starts + width + step)
    finally:
        engine.SESSION.key_valid = None
    return [[t for t in row if t != eos] for row in out]


def long_run(lab: engine.LabModel, task_ids: Sequence[int], cache: Any, new_tokens: int,
             eos: int | None, observer: Any = None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """One long input: ``(nll, argmax)`` over its last half (teacher-forced) and a greedy answer."""
    ids = torch.tensor([list(task_ids)])
    half = ids.shape[1] // 2
    logits = _prefill(lab, ids, cache, 0, observer, ids.shape[1] - half + 1)[0]  # positions half-1 .. n-1
    nll = torch.nn.functional.cross_entropy(logits[:-1], ids[0, half:], reduction="none")
    answer = [int(logits[-1].argmax())]
    while len(answer) < new_tokens and answer[-1] != eos:
        step = engine.forward(lab, torch.tensor([[answer[-1]]]), cache, ids.shape[1] + len(answer) - 1)
        answer.append(int(step[0, -1].argmax()))
    return nll, logits[:-1].argmax(-1), [t for t in answer if t != eos]


def end_to_end(lab: engine.LabModel, variant: str | None, calibrator: ScaleCalibrator,
               eval_prompts: Sequence[Sequence[int]], long_prompts: Sequence[Sequence[int]],
               s: Fp8Settings, observer: Any = None, tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The model on ``variant``'s cache: per long prompt ``(nll, argmax, answer)``, eval answers.

    ``observer`` sees every prefill (the reference run feeds the numerics with it); ``tick`` is
    called after each long prompt and each eval batch.
    """
    eos = lab.tokenizer.eos_token_id
    long = []
    for ids in long_prompts:
        long.append(long_run(lab, ids, make_cache(variant, calibrator, lab.num_layers), s.long_new_tokens, eos,
                             observer))
        tick()
    answers: list[list[int]] = []
    for start in range(0, len(eval_prompts), s.batch_size):
        batch = eval_prompts[start:start + s.batch_size]
        answers += generate_batch(lab, batch, make_cache(variant, calibrator, lab.num_layers), s.max_new_tokens,
                                  eos, observer)
        tick()
    return {"long": long, "answers": answers}


def _summary(run: dict[str, Any], ref: dict[str, Any], lab: engine.LabModel, eval_items: Sequence[EvalItem],
             long_tasks: Sequence[LongTask]) -> dict[str, Any]:
    decode = lab.tokenizer.decode
    nll = torch.cat([n for n, _, _ in run["long"]])
    ref_nll = torch.cat([n for n, _, _ in ref["long"]])
    top1 = torch.cat([(a == b).float() for (_, a, _), (_, b, _) in zip(run["long"], ref["long"])])
    texts = [decode(a) for a in run["answers"]]
    ref_texts = [decode(a) for a in ref["answers"]]
    right = [is_correct(t, item.answers) for t, item in zip(texts, eval_items)]
    ref_right = [is_correct(t, item.answers) for t, item in zip(ref_texts, eval_items)]
    long_texts = [decode(a) for _, _, a in run["long"]]
    ppl, ref_ppl = math.exp(float(nll.mean())), math.exp(float(ref_nll.mean()))
    return {"ppl": ppl, "ppl_change": ppl / ref_ppl - 1, "top1": float(top1.mean()), "scored_tokens": int(nll.numel()),
            "eval_questions": len(eval_items), "eval_right": sum(right),
            "eval_same_text": sum(a.strip() == b.strip() for a, b in zip(texts, ref_texts)),
            "eval_same_verdict": sum(a == b for a, b in zip(right, ref_right)),
            "long_tasks": len(long_tasks), "long_same": sum(a == b for (_, _, a), (_, _, b) in zip(run["long"], ref["long"])),
            "long_right": sum(is_correct(t, task.answers) for t, task in zip(long_texts, long_tasks)),
            "long_answers": long_texts, "eval_answers": texts}


def run_study(lab: engine.LabModel, eval_items: Sequence[EvalItem], long_tasks: Sequence[LongTask],
              calibration_long: Sequence[LongTask], s: Fp8Settings, progress: Progress) -> tuple[dict[str, Any], ScaleCalibrator]:
    """The whole FP8 study; returns the JSON-ready record and the calibrator (for the scales file)."""
    calib_items, held_items = list(eval_items[0::2]), list(eval_items[1::2])
    encode = lab.tokenizer.encode
    calib_eval = [chat_ids(lab, i.question) for i in calib_items]
    calib_long = [encode(t.text) for t in calibration_long]
    held_eval = [chat_ids(lab, i.question) for i in held_items]
    held_long = [encode(t.text) for t in long_tasks]
    calibrator = calibrate(lab, calib_eval, calib_long, s, progress)
    record: dict[str, Any] = {
        "calibration": {"eval_questions": len(calib_eval), "long_tasks": len(calib_long),
                        "tokens": sum(map(len, calib_eval)) + sum(map(len, calib_long))},
        "held_out": {"eval_questions": len(held_items), "long_tasks": len(long_tasks),
                     "long_tokens": [len(ids) for ids in held_long]},
        "scales": {fmt: {"k_amax": calibrator.k.tolist(), "v_amax": calibrator.v.tolist()} for fmt in ("e4m3",)},
    }
    runs: dict[str | None, dict[str, Any]] = {}
    variants: list[str | None] = [None, *s.e2e_variants]
    table = NumericsTable(s.numeric_variants, lab.num_layers)
    observer = NumericsObserver(table, {v: variant_scales(v, calibrator, lab.num_layers) for v in s.numeric_variants},
                                lab.scaling)
    steps = len(variants) * (len(held_long) + -(-len(held_eval) // s.batch_size))
    done = [0]

    def tick() -> None:
        done[0] += 1
        progress("fp8 end to end", done[0], steps)

    for variant in variants:
        runs[variant] = end_to_end(lab, variant, calibrator, held_eval, held_long, s,
                                   observer if variant is None else None, tick)
    record["numerics"] = table.result()
    ref = runs[None]
    e2e = {v: _summary(runs[v], ref, lab, held_items, long_tasks) for v in s.e2e_variants}
    reference = _summary(ref, ref, lab, held_items, long_tasks)
    e2e["reference"] = reference
    record["end_to_end"] = e2e
    return record, calibrator
