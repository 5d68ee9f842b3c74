"""Checks of the KV lab's torch code, run by the worker venv's python (torch lives only there).

``python kv_lab_checks.py TMP_DIR`` runs every check on a tiny randomly initialised Llama (2
layers, 4 query heads, 2 KV heads, head dim 16) and prints one JSON object of figures, one key per
check (one interpreter start: importing transformers is the slow part); ``test_kv_lab_torch.py``
asserts on them. A failed ``assert`` here exits non-zero with the
traceback. Not collected by pytest (no ``test_`` prefix): it imports torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from backends.kv.lab import engine, fp8, pruning, scales, study_fp8


def tiny() -> engine.LabModel:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return engine.wrap_model(LlamaForCausalLM(cfg), None)


def attention() -> dict:
    """The lab's attention against transformers' SDPA, full vs incremental vs chunked."""
    lab = tiny()
    ids = torch.randint(0, 128, (1, 40))
    lab.model.config._attn_implementation = "sdpa"
    reference = lab.model(input_ids=ids).logits
    lab.model.config._attn_implementation = engine.ATTN_NAME
    full = engine.forward(lab, ids, DynamicCache(), 0)
    cache = DynamicCache()
    steps = [engine.forward(lab, ids[:, :30], cache, 0)] + [engine.forward(lab, ids[:, i:i + 1], cache, i)
                                                             for i in range(30, 40)]
    cache = DynamicCache()
    chunks = [engine.forward(lab, ids[:, :25], cache, 0), engine.forward(lab, ids[:, 25:], cache, 25)]
    pruned = pruning.PrunedCache("h2o", 1.0)
    kept = [pruning.run_forward(lab, pruned, ids[:, :30]), pruning.run_forward(lab, pruned, ids[:, 30:])]
    a, b = ids[0, :10].tolist(), ids[0, 5:25].tolist()
    together = study_fp8.generate_batch(lab, [a, b], DynamicCache(), 6, None)
    alone = study_fp8.generate_batch(lab, [a], DynamicCache(), 6, None) + study_fp8.generate_batch(
        lab, [b], DynamicCache(), 6, None)
    return {"vs_sdpa": float((reference.detach() - full).abs().max()), "incremental": float((torch.cat(steps, 1) - full).abs().max()),
            "chunked": float((torch.cat(chunks, 1) - full).abs().max()),
            "pruned_keep_all": float((torch.cat(kept, 1) - full).abs().max()),
            "batch_equals_single": together == alone, "generated": together}


def numerics() -> dict:
    """FP8 round trips: exact values, saturation, underflow, error of each format, KL."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 64, 16) * 3
    exact = torch.tensor([0.5, 1.0, 1.125, -448.0, 2.0 ** -9]).view(1, 1, -1, 1)
    per_head = fp8.amax_scale(x, "e4m3", "head")
    q = torch.randn(1, 4, 64, 16)
    return {
        "exact_e4m3": fp8.quantize_dequantize(exact, "e4m3").flatten().tolist(),
        "saturates": fp8.quantize_dequantize(torch.full((1, 1, 1, 1), 1000.0), "e4m3").item(),
        "e4m3_underflow": fp8.quantize_dequantize(torch.full((1, 1, 1, 1), 5e-4), "e4m3").item(),
        "e5m2_keeps_small": fp8.quantize_dequantize(torch.full((1, 1, 1, 1), 5e-4), "e5m2").item(),
        "err": {f: fp8.relative_error(x, fp8.quantize_dequantize(x, f)) for f in ("bf16", "e4m3", "e5m2")},
        "per_head_scale_shape": list(per_head.shape),
        "per_head_scale": per_head.tolist(), "amax_per_head": x.abs().amax(dim=(0, 2, 3)).tolist(),
        "kl": fp8.attention_kl(q, x, [x, fp8.quantize_dequantize(x, "e4m3"), fp8.quantize_dequantize(x, "e5m2")], 0.25),
    }


def caches(out_dir: str) -> dict:
    """QuantizedCache stores round-tripped K/V; PrunedCache policies; the scales checkpoint."""
    lab = tiny()
    ids = torch.randint(0, 128, (1, 200))
    plain, quant = DynamicCache(), engine.QuantizedCache("e4m3", [0.01, 0.02], [0.03, 0.04])
    engine.forward(lab, ids[:, :20], plain, 0)
    engine.forward(lab, ids[:, :20], quant, 0)
    layer0_k = fp8.quantize_dequantize(plain.layers[0].keys, "e4m3", 0.01)
    result: dict = {"quantized_cache_exact": bool(torch.equal(quant.layers[0].keys, layer0_k)),
                    "quantized_differs": bool(not torch.equal(quant.layers[0].keys, plain.layers[0].keys))}
    for policy in pruning.POLICIES:
        cache = pruning.PrunedCache(policy, 0.3)
        last = pruning.run_forward(lab, cache, ids[:, :150])
        after_prefill = [int(cache.layers[0].keys.shape[2]), cache.pos[0][0].tolist()]
        nll, top, answer = pruning.continue_and_answer(lab, cache, last[0, -1], ids[:, 150:], 16, 5, None)
        result[policy] = {"prefill_kept": after_prefill[0], "positions": after_prefill[1], "budget": cache.budget(),
                          "kept_end": int(cache.layers[0].keys.shape[2]), "seen": cache.seen, "nll": len(nll),
                          "answer": len(answer), "sorted": all(bool((p[1:] > p[:-1]).all()) for p in cache.pos[0])}
    acc = torch.tensor([[5.0, 0, 0, 9, 0, 1, 8, 0, 0, 0]])
    result["h2o_select"] = pruning.select("h2o", 4, acc, torch.ones_like(acc), torch.zeros_like(acc)).tolist()
    result["streaming_select"] = pruning.select("streaming", 6, acc, torch.ones_like(acc), acc).tolist()
    calibrator = scales.ScaleCalibrator(2, 2)
    calibrator.observe(0, torch.full((1, 2, 3, 4), 2.0), torch.full((1, 2, 3, 4), 4.0))
    calibrator.observe(1, torch.tensor([1.0, 8.0]).view(1, 2, 1, 1).expand(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    k, v = calibrator.scales("e4m3", "tensor")
    kh, _ = calibrator.scales("e4m3", "head")
    model_dir = Path(out_dir) / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (model_dir / "model.safetensors").write_bytes(b"weights")
    checkpoint = scales.write_vllm_checkpoint(model_dir, Path(out_dir) / "ckpt", k, v, "tensor")
    from safetensors.torch import load_file

    tensors = load_file(str(checkpoint / "kv_scales.safetensors"))
    result["scales"] = {"k": [float(s) for s in k], "v": [float(s) for s in v], "k_head_1": kh[1].tolist(),
                        "config": json.loads((checkpoint / "config.json").read_text()),
                        "tensors": {name: t.tolist() for name, t in sorted(tensors.items())},
                        "linked": (checkpoint / "model.safetensors").read_bytes().decode()}
    return result


if __name__ == "__main__":
    print(json.dumps({"attention": attention(), "numerics": numerics(), "caches": caches(sys.argv[1])}))
