"""Calibrated per-layer K/V scales, and writing them in the form vLLM loads.

[worker env: torch, safetensors] Calibration (:class:`ScaleCalibrator`): the running ``amax`` of
each layer's K and V over a calibration split, per tensor and per KV head; the scale is
``amax / fp8_max`` (448 for E4M3), as llm-compressor computes a static ``kv_cache_scheme``.

The form vLLM loads (vLLM ``docs/features/quantization/quantized_kvcache.md``, "Calibration with
a dataset (via llm-compressor)"; loader: ``vllm/model_executor/layers/quantization/
compressed_tensors/compressed_tensors.py`` ``CompressedTensorsKVCacheMethod`` and
``vllm/model_executor/model_loader/weight_utils.py`` ``maybe_remap_kv_scale_name``):

- the checkpoint's ``config.json`` carries ``quantization_config`` with ``quant_method:
  compressed-tensors`` and ``kv_cache_scheme: {num_bits: 8, type: float, strategy: tensor |
  attn_head, dynamic: false, symmetric: true}`` (vLLM refuses any other type, width or asymmetry);
- the weights carry float32 tensors ``model.layers.N.self_attn.k_scale`` and ``.v_scale``, shape
  ``[1]`` (``tensor``) or ``[num_kv_heads]`` (``attn_head``; vLLM applies per-head scales only on
  its Flash Attention backend), which vLLM remaps to ``...self_attn.attn.k_scale``.

:func:`write_vllm_checkpoint` writes both: a checkpoint directory that links the original model's
files and adds ``kv_scales.safetensors`` and the amended ``config.json``, servable with
``vllm serve DIR --kv-cache-dtype fp8``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from backends.kv.lab.fp8 import fp8_max

STRATEGIES = {"tensor": "tensor", "head": "attn_head"}
"""Lab granularity -> compressed-tensors ``kv_cache_scheme.strategy``."""


class ScaleCalibrator:
    """Running per-layer ``amax`` of K and V (per KV head; the tensor amax is their max)."""

    def __init__(self, num_layers: int, num_kv_heads: int) -> None:
        self.k = torch.zeros(num_layers, num_kv_heads)
        self.v = torch.zeros(num_layers, num_kv_heads)

    def observe(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Fold in one layer's ``[batch, kv_heads, tokens, head_dim]`` K and V."""
        self.k[layer] = torch.maximum(self.k[layer], key.abs().amax(dim=(0, 2, 3)).float())
        self.v[layer] = torch.maximum(self.v[layer], value.abs().amax(dim=(0, 2, 3)).float())

    def scales(self, fmt: str, granularity: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer ``(k_scales, v_scales)``: 0-d tensors (``tensor``) or ``[kv_heads]`` (``head``)."""
        def one(amax: torch.Tensor) -> torch.Tensor:
            amax = amax.amax() if granularity == "tensor" else amax
            return torch.clamp(amax, min=1e-8) / fp8_max(fmt)
        if granularity not in STRATEGIES:
            raise ValueError(f"granularity must be tensor or head, got {granularity!r}")
        return [one(a) for a in self.k], [one(a) for a in self.v]


def quantization_config(granularity: str) -> dict[str, Any]:
    """The ``quantization_config`` entry of ``config.json`` for a static FP8 KV cache."""
    return {"quant_method": "compressed-tensors", "format": "dense", "config_groups": {}, "ignore": [],
            "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": STRATEGIES[granularity],
                                "dynamic": False, "symmetric": True}}


def scale_tensors(k_scales: list[torch.Tensor], v_scales: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint tensors ``model.layers.N.self_attn.{k,v}_scale`` (float32, at least 1-d)."""
    out: dict[str, torch.Tensor] = {}
    for layer, (k, v) in enumerate(zip(k_scales, v_scales, strict=True)):
        out[f"model.layers.{layer}.self_attn.k_scale"] = k.reshape(-1).float().contiguous()
        out[f"model.layers.{layer}.self_attn.v_scale"] = v.reshape(-1).float().contiguous()
    return out


def write_vllm_checkpoint(model_dir: Path, out_dir: Path, k_scales: list[torch.Tensor],
                          v_scales: list[torch.Tensor], granularity: str) -> Path:
    """[io] A checkpoint directory: ``model_dir``'s files linked, plus the scales and config; its path."""
    from safetensors.torch import save_file

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for source in model_dir.iterdir():
        target = out_dir / source.name
        if source.name in ("config.json", "kv_scales.safetensors") or source.name.startswith("."):
            continue
        if target.is_symlink() or target.exists():
            target.unlink()
        os.symlink(source.resolve(), target)
    save_file(scale_tensors(k_scales, v_scales), str(out_dir / "kv_scales.safetensors"))
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = quantization_config(granularity)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out_dir
