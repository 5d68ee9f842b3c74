"""FP8 numerics of K and V: quantize-dequantize with torch's float8 dtypes, and the error figures.

[worker env: torch] Formats (OCP 8-bit floating point, as torch implements them):

- ``e4m3``: ``torch.float8_e4m3fn``, 4 exponent and 3 mantissa bits, finite range +-448, smallest
  subnormal 2**-9;
- ``e5m2``: ``torch.float8_e5m2``, 5 exponent and 2 mantissa bits, range +-57344, smallest
  subnormal 2**-16;
- ``bf16``: a bfloat16 round trip, the noise floor of an unquantized 16-bit cache.

Scaled quantization follows vLLM's (``scaled_fp8_conversion``): ``q = clamp(x / scale, -max, max)``
cast to FP8, dequantized as ``q * scale``. ``scale`` is a scalar (per tensor) or one value per KV
head, broadcast over ``[batch, kv_heads, tokens, head_dim]``. A scale of 1.0 is vLLM's default
(``kv_cache_dtype="fp8"`` without calibration); a calibrated one is ``amax / max`` (llm-compressor).

Figures (all on float32 tensors):

- :func:`relative_error`: ``||x - qdq(x)||_F / ||x||_F``;
- :func:`attention_kl`: mean over heads and query rows of ``KL(P || P_q)``, where ``P`` is the
  causal softmax attention of the reference queries over the reference keys and ``P_q`` the same
  over the quantized keys (nats).
"""

from __future__ import annotations

import torch

FORMATS: dict[str, torch.dtype] = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
"""Lab format name -> torch dtype (``bf16`` is handled apart: no scale)."""


def fp8_max(fmt: str) -> float:
    """Largest finite value of ``fmt`` (448 for e4m3, 57344 for e5m2)."""
    return float(torch.finfo(FORMATS[fmt]).max)


def quantize_dequantize(x: torch.Tensor, fmt: str, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """``x`` after an FP8 (or bf16) round trip, in ``x``'s dtype.

    ``x``: ``[batch, kv_heads, tokens, head_dim]``; ``scale``: a float, a 0-d tensor or one value per
    KV head (shape ``[kv_heads]``). Out-of-range values saturate at +-max (as vLLM's kernels do).
    """
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected bf16, {', '.join(FORMATS)}")
    s = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    if s.ndim == 1:
        s = s.view(1, -1, 1, 1)
    limit = fp8_max(fmt)
    q = torch.clamp(x.float() / s, -limit, limit).to(FORMATS[fmt])
    return (q.float() * s).to(x.dtype)


def amax_scale(x: torch.Tensor, fmt: str, granularity: str) -> torch.Tensor:
    """The calibrated scale of ``x`` (``amax / max``): 0-d for ``tensor``, ``[kv_heads]`` for ``head``."""
    if granularity == "tensor":
        amax = x.abs().amax()
    elif granularity == "head":
        amax = x.abs().amax(dim=(0, 2, 3))
    else:
        raise ValueError(f"granularity must be tensor or head, got {granularity!r}")
    return torch.clamp(amax.float(), min=1e-8) / fp8_max(fmt)


def relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``||x - y||_F / ||x||_F`` (0 when both are zero)."""
    norm = x.float().norm()
    return float((x.float() - y.float()).norm() / norm) if norm > 0 else 0.0


def attention_kl(query: torch.Tensor, key: torch.Tensor, quantized_keys: list[torch.Tensor], scaling: float,
                 max_rows: int = 256) -> list[float]:
    """Mean ``KL(P || P_q)`` (nats) over heads and query rows, one value per quantized key tensor.

    ``query``: ``[batch, heads, q, head_dim]`` for the last ``q`` positions of ``key``
    (``[batch, kv_heads, k, head_dim]``). At most ``max_rows`` query rows, evenly spaced and always
    including the last, are scored (the reference softmax is computed once for all of them).
    """
    q_len, k_len = query.shape[2], key.shape[2]
    rows = torch.unique(torch.linspace(0, q_len - 1, min(q_len, max_rows)).round().long())
    groups = query.shape[1] // key.shape[1]
    q = query[:, :, rows].float()
    visible = (rows + (k_len - q_len)).view(1, 1, -1, 1) >= torch.arange(k_len).view(1, 1, 1, -1)

    def log_probs(k: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.float().repeat_interleave(groups, dim=1).transpose(-1, -2)) * scaling
        return torch.log_softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)

    lp = log_probs(key)
    p = lp.exp()
    out: list[float] = []
    for kq in quantized_keys:
        diff = torch.where(visible, lp - log_probs(kq), torch.zeros_like(lp))
        out.append(float((p * diff).sum(-1).mean()))
    return out
