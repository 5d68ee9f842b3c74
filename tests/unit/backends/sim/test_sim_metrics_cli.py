"""Metric rendering (vLLM names, labels, buckets) and ``kvgate sim`` option handling."""

from __future__ import annotations

import argparse

import pytest

from backends.sim.cli import add_arguments, build_configs, parse_latency
from backends.sim.latency import LatencyModel
from backends.sim.prometheus import GaugeSnapshot, WorkerMetrics, one_two_five_buckets, render


def test_one_two_five_buckets() -> None:
    assert one_two_five_buckets(100) == (1, 2, 5, 10, 20, 50, 100)


def test_render_uses_vllm_names_and_sorted_labels() -> None:
    metrics = WorkerMetrics(max_model_len=2048)
    metrics.ttft.observe(0.03)
    metrics.ttft.observe(0.9)
    metrics.record_finished("length", 1000, 8)
    gauges = GaugeSnapshot(running=2, waiting=3, kv_usage=0.25, prefix_queries=2000,
                           prefix_hits=1024, preemptions=1)
    text = render("m", gauges, metrics, {"num_gpu_blocks": "728", "block_size": "128"})
    lines = text.splitlines()
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 2.0' in lines
    assert 'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0' in lines
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1024.0' in lines
    assert ('vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0'
            in lines)
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="m"} 1.0' in lines
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0' in lines
    assert 'vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="728"} 1.0' in lines
    assert "# TYPE vllm:inter_token_latency_seconds histogram" in lines


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_build_configs_applies_overrides_and_seeds_each_worker() -> None:
    configs = build_configs(_args("--count", "3", "--preset", "gpu-8b", "--num-blocks", "99",
                                  "--latency", "0.1,0.2,0.3", "--seed", "5",
                                  "--fault", "error:p=0.1", "--reasoning-fraction", "0.5"))
    assert [c.seed for c in configs] == [5, 6, 7]
    assert configs[0].preset.num_blocks == 99 and configs[0].preset.block_size == 16
    assert configs[0].preset.latency == LatencyModel(0.1, 0.2, 0.3)
    assert configs[1].faults[0].p == 0.1 and configs[2].output.reasoning_fraction == 0.5


def test_defaults_are_the_fitted_cpu_preset() -> None:
    (config,) = build_configs(_args())
    assert config.preset.name == "vllm-cpu" and config.preset.block_size == 128


@pytest.mark.parametrize(
    "argv",
    [("--latency", "1,2"), ("--fault", "nope"), ("--output-len", "fixed"),
     ("--reasoning-fraction", "2")],
)
def test_bad_options_raise(argv: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        build_configs(_args(*argv))


def test_parse_latency_with_admission() -> None:
    assert parse_latency("0.01,0.001,0.002,0.005").admission_s == 0.005
