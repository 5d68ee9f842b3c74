"""The chart's vLLM command line is exactly what kvgate's own worker spec emits.

For each enabled worker cluster, the values are mapped onto a :class:`backends.workers.spec.WorkerSpec`
(launcher ``vllm-serve``, device ``gpu``) and ``backends.workers.vllm_args.worker_argv`` is compared with
the rendered container's ``command + args``, so the chart and the worker spec cannot drift.
WorkerSpec has no KV-events field: the chart's ``--kv-events-config`` travels as extra args,
ahead of the cluster's own ``extraArgs``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.workers.spec import WorkerSpec
from backends.workers.vllm_args import OFFLINE_ENV, worker_argv

from .tools import CI_VALUES, container, enabled_clusters, env_map, fullname

# Every value the chart turns into a flag, with the opposite of the GPU install's choices.
FLIPPED = """\
workers:
  clusters:
    fast:
      enabled: true
      replicas: 1
      gpus: 4
      tensorParallelSize: 0
      kvCacheDtype: fp8_e5m2
      enablePrefixCaching: false
      enableChunkedPrefill: false
      enablePromptTokensDetails: false
      maxModelLen: 0
      maxNumSeqs: 256
      maxNumBatchedTokens: 0
      blockSize: 0
      gpuMemoryUtilization: 1.0
      prefixCachingHashAlgo: ""
      reasoningParser: qwen3
      kvEvents: {enabled: false, port: 5557, topic: kv-events}
      extraArgs: ["--seed", "7"]
    reasoning:
      enabled: true
      replicas: 1
      gpus: 2
      tensorParallelSize: 1
      port: 9000
      gpuMemoryUtilization: 0
      reasoningParser: ""
"""


def spec_for(c: dict[str, Any]) -> WorkerSpec:
    """The WorkerSpec that the values of one worker cluster describe (0 / "" mean "not set")."""
    extra: list[str] = []
    if c["kvEvents"]["enabled"]:
        events = {
            "enable_kv_cache_events": True,
            "endpoint": f"tcp://*:{c['kvEvents']['port']}",
            "publisher": "zmq",
            "topic": c["kvEvents"]["topic"],
        }
        extra += ["--kv-events-config", json.dumps(events, separators=(",", ":"), sort_keys=True)]
    return WorkerSpec(
        model=c["model"],
        served_model_name=c["servedModelName"],
        port=c["port"],
        host="0.0.0.0",
        kv_cache_dtype=c["kvCacheDtype"],
        max_model_len=c["maxModelLen"] or None,
        enable_prefix_caching=c["enablePrefixCaching"],
        block_size=c["blockSize"] or None,
        prefix_caching_hash_algo=c["prefixCachingHashAlgo"] or None,
        enable_chunked_prefill=c["enableChunkedPrefill"],
        max_num_batched_tokens=c["maxNumBatchedTokens"] or None,
        max_num_seqs=c["maxNumSeqs"] or None,
        gpu_memory_utilization=c["gpuMemoryUtilization"] or None,
        tensor_parallel_size=c["tensorParallelSize"] or c["gpus"],
        enable_prompt_tokens_details=c["enablePromptTokensDetails"],
        reasoning_parser=c["reasoningParser"] or None,
        extra_args=tuple(extra + c["extraArgs"]),
        device="gpu",
        launcher="vllm-serve",
    )


@pytest.fixture(scope="module")
def flipped_values(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("values") / "flipped-values.yaml"
    path.write_text(FLIPPED)
    return path


@pytest.mark.parametrize("variant", ["gpu-values", "flipped"])
def test_chart_argv_equals_worker_argv(variant, rendered, flipped_values):
    files = [CI_VALUES / "gpu-values.yaml"] + ([flipped_values] if variant == "flipped" else [])
    r = rendered(*files)
    clusters = enabled_clusters(r.values)
    assert set(clusters) == {"reasoning", "fast"}
    for name, c in clusters.items():
        vllm = container(r.one("StatefulSet", f"{fullname()}-worker-{name}"), "vllm")
        expected = worker_argv(spec_for(c), python="python")
        assert expected[:2] == ["vllm", "serve"]
        assert vllm["command"] + vllm["args"] == expected, name


def test_flipped_values_reach_the_no_flags(rendered, flipped_values):
    r = rendered(CI_VALUES / "gpu-values.yaml", flipped_values)
    args = container(r.one("StatefulSet", f"{fullname()}-worker-fast"), "vllm")["args"]
    assert "--no-enable-prefix-caching" in args and "--no-enable-chunked-prefill" in args
    assert "--kv-events-config" not in args and "--enable-prompt-tokens-details" not in args
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert args[args.index("--gpu-memory-utilization") + 1] == "1.0"


def test_worker_env_keeps_the_spec_settings_that_apply_in_a_cluster(gpu_install):
    """worker_env's always-on settings, except the offline switches: in a cluster the worker
    downloads its model into the cache volume on first start."""
    wanted = {k: v for k, v in OFFLINE_ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    for name in enabled_clusters(gpu_install.values):
        env = env_map(container(gpu_install.one("StatefulSet", f"{fullname()}-worker-{name}"), "vllm"))
        assert {k: env[k].get("value") for k in wanted} == wanted
