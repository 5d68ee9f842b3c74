"""Every flag kvgate emits is accepted by the installed vLLM's own `serve` parser (no worker starts).

Runs ``backends/workers/vllm_flag_probe.py`` in the worker venv once for a matrix of specs: the golden
argv cases, each KV dtype, feature toggles, GPU-only flags, reasoning parsers, KV events and a pooling
runner (``--runner pooling --convert embed``). A
vLLM upgrade that renames or drops a flag fails here, not in a deployment.
"""

from __future__ import annotations

import dataclasses

import pytest

from backends.workers.flag_check import FlagVerdict, check_argvs, probe_argv
from backends.workers.prepared import Runtime
from backends.workers.spec import KV_CACHE_DTYPES, MODEL_DTYPES, WorkerSpec
from backends.workers.vllm_args import kv_events_json
from tests.e2e.conftest import START_TIMEOUT_S
from tests.unit.backends.workers.test_vllm_args import ARGV_CASES

pytestmark = pytest.mark.e2e


def matrix(model: str) -> list[WorkerSpec]:
    cpu = WorkerSpec(model=model, served_model_name="smollm2", port=8001, cpu_kvcache_space_gib=1)
    gpu = WorkerSpec(model=model, served_model_name="m", port=9000, device="gpu", launcher="vllm-serve",
                     cpu_kvcache_space_gib=None)
    specs = [WorkerSpec(**{**case.values[0], "model": model}) for case in ARGV_CASES]
    specs += [dataclasses.replace(cpu, kv_cache_dtype=dtype) for dtype in KV_CACHE_DTYPES]
    specs += [dataclasses.replace(cpu, kv_cache_dtype="auto", dtype=dtype) for dtype in MODEL_DTYPES]  # --dtype
    specs += [
        dataclasses.replace(cpu, enable_prefix_caching=False, enable_chunked_prefill=False,
                            enable_prompt_tokens_details=False, enforce_eager=True),
        dataclasses.replace(cpu, block_size=32, prefix_caching_hash_algo="sha256", max_num_batched_tokens=2048,
                            max_num_seqs=4, max_model_len=2048),
        dataclasses.replace(cpu, prefix_caching_hash_algo="xxhash", kv_events_config=kv_events_json("tcp://*:6001", topic="w0")),
        dataclasses.replace(gpu, gpu_memory_utilization=0.92, tensor_parallel_size=8, kv_cache_dtype="fp8_e4m3",
                            cuda_visible_devices="0,1,2,3,4,5,6,7", reasoning_parser="qwen3"),
        dataclasses.replace(gpu, reasoning_parser="deepseek_r1", kv_events_config=kv_events_json(),
                            extra_args=("--disable-log-stats",)),
        dataclasses.replace(cpu, served_model_name="smollm2-embed", runner="pooling", convert="embed"),  # embeddings
        dataclasses.replace(cpu, runner="generate", convert="none"),
    ]
    return specs


REJECTED = [
    ["--disable-log-requests"],  # removed in vLLM 0.32 (now --no-enable-log-requests)
    ["--kv-cache-dtype", "fp16"],
    ["--reasoning-parser", "no-such-parser"],
    ["--kv-events-config", '{"no_such_field": 1}'],
    ["--runner", "embed"],  # the task moved to --convert
]


@pytest.fixture(scope="module")
def verdicts(vllm_runtime: Runtime) -> tuple[list[FlagVerdict], list[FlagVerdict]]:
    """(matrix verdicts, verdicts for REJECTED), from one probe run (vLLM's import is slow)."""
    model = str(vllm_runtime.model_dir)
    argvs = [probe_argv(spec) for spec in matrix(model)] + [["--model", model, *argv] for argv in REJECTED]
    results = check_argvs(argvs, vllm_runtime.worker_python, timeout_s=START_TIMEOUT_S)  # 180 s ran out under load
    return results[:-len(REJECTED)], results[-len(REJECTED):]


def test_every_emitted_flag_is_accepted_by_vllm(verdicts: tuple[list[FlagVerdict], list[FlagVerdict]]) -> None:
    accepted, _ = verdicts
    rejected = [(" ".join(v.argv), v.error) for v in accepted if not v.ok]
    assert not rejected, rejected
    assert len(accepted) >= 12


def test_the_probe_does_reject_what_vllm_rejects(verdicts: tuple[list[FlagVerdict], list[FlagVerdict]]) -> None:
    _, refused = verdicts
    assert [v.ok for v in refused] == [False] * len(REJECTED)
    assert "unrecognized arguments: --disable-log-requests" in refused[0].error
    assert "invalid choice: 'fp16'" in refused[1].error
    assert "not registered" in refused[2].error
    assert "--kv-events-config" in refused[3].error
    assert "invalid choice: 'embed'" in refused[4].error
