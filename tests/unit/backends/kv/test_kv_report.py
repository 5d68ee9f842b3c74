"""Reported capacity parsed from a real vLLM-CPU /metrics page and start-up logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.kv.report import ReportedCapacity, from_log, from_metrics

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_from_real_metrics_page() -> None:
    reported = from_metrics((FIXTURES / "vllm_cpu_metrics_auto.txt").read_text())
    assert reported == ReportedCapacity(46_592, "metrics", num_blocks=364, block_size=128, cache_dtype="auto",
                                        max_concurrency=22.75)


def test_tokens_from_blocks_when_the_size_label_is_missing() -> None:
    text = 'vllm:cache_config_info{block_size="16",cache_dtype="fp8",num_gpu_blocks="1000",engine="0"} 1.0\n'
    assert from_metrics(text) == ReportedCapacity(16_000, "metrics", 1000, 16, "fp8", None)


@pytest.mark.parametrize("text", ["", "# HELP vllm:cache_config_info x\n", 'vllm:num_requests_running{engine="0"} 0.0\n'])
def test_no_capacity_in_metrics(text: str) -> None:
    assert from_metrics(text) is None


@pytest.mark.parametrize(("name", "tokens", "concurrency"), [
    ("vllm_cpu_startup_auto.log", 46_592, 22.75),
    ("vllm_cpu_startup_fp8.log", 93_184, 45.5),
])
def test_from_real_startup_logs(name: str, tokens: int, concurrency: float) -> None:
    assert from_log((FIXTURES / name).read_text()) == ReportedCapacity(tokens, "log", max_concurrency=concurrency)


def test_gpu_log_line_and_last_one_wins() -> None:
    text = ("INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,000 tokens, Maximum concurrency for 8,192 tokens per request: 0.12x\n"
            "INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x\n")
    assert from_log(text) == ReportedCapacity(1_234_560, "log", max_concurrency=150.7)
    assert from_log("nothing here") is None
