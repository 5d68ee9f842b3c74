"""Read a `vllm serve` command line back into a WorkerSpec, to check it against worker_argv.

A command line written by hand (compose, systemd) is canonical when
``worker_argv(parse_vllm_serve(argv), "python") == argv``: the same flags, in the same order and
spelling, that kvgate's worker spec emits. Flags the spec does not model go to ``extra_args``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.workers.spec import WorkerSpec

_VALUE_FLAGS: dict[str, tuple[str, type]] = {
    "--served-model-name": ("served_model_name", str),
    "--host": ("host", str),
    "--port": ("port", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--max-model-len": ("max_model_len", int),
    "--block-size": ("block_size", int),
    "--prefix-caching-hash-algo": ("prefix_caching_hash_algo", str),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "--reasoning-parser": ("reasoning_parser", str),
}
_BOOL_FLAGS: dict[str, tuple[str, bool]] = {
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--enable-chunked-prefill": ("enable_chunked_prefill", True),
    "--no-enable-chunked-prefill": ("enable_chunked_prefill", False),
    "--enable-prompt-tokens-details": ("enable_prompt_tokens_details", True),
    "--enforce-eager": ("enforce_eager", True),
}


def parse_vllm_serve(argv: Sequence[str]) -> WorkerSpec:
    """``vllm serve MODEL FLAGS...`` -> a GPU WorkerSpec with launcher ``vllm-serve``."""
    assert list(argv[:2]) == ["vllm", "serve"], argv[:2]
    fields: dict[str, Any] = {"model": argv[2], "enable_prompt_tokens_details": False}
    extra: list[str] = []
    rest = list(argv[3:])
    while rest:
        flag = rest.pop(0)
        if flag in _VALUE_FLAGS and not extra:
            name, kind = _VALUE_FLAGS[flag]
            fields[name] = kind(rest.pop(0))
        elif flag in _BOOL_FLAGS and not extra:
            name, value = _BOOL_FLAGS[flag]
            fields[name] = value
        else:
            extra += [flag, *rest]
            break
    return WorkerSpec(**fields, extra_args=tuple(extra), device="gpu", launcher="vllm-serve")
