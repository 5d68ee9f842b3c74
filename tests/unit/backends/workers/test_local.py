"""Tests for backends.workers.local: spec building (pure), ports and thread binds."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.workers.local import build_specs, free_ports, thread_binds
from backends.workers.prepared import Runtime

RUNTIME = Runtime(worker_python=Path("/w/bin/python"), model_dir=Path("/models/smol"))


@pytest.mark.parametrize(("count", "cpus", "binds"), [
    (1, 2, ["0"]), (2, 2, ["0", "1"]), (2, 1, ["0", "0"]), (2, 16, ["0", "1"]), (1, 0, ["0"]),
])
def test_thread_binds(count: int, cpus: int, binds: list[str]) -> None:
    assert thread_binds(count, cpus) == binds


def test_build_specs_defaults_follow_the_cpu_recipe() -> None:
    a, b = build_specs(RUNTIME, [8001, 8002], binds=["0", "1"])
    assert (a.port, a.cpu_omp_threads_bind, b.port, b.cpu_omp_threads_bind) == (8001, "0", 8002, "1")
    assert a.model == "/models/smol" and a.served_model_name == "smollm2"
    assert (a.device, a.launcher, a.kv_cache_dtype, a.enforce_eager) == ("cpu", "module", "fp8", True)
    assert (a.max_model_len, a.cpu_kvcache_space_gib) == (2048, 1)
    assert a.enable_prefix_caching and a.enable_chunked_prefill and a.enable_prompt_tokens_details


def test_build_specs_overrides_apply_to_every_worker() -> None:
    specs = build_specs(RUNTIME, [1, 2], kv_cache_dtype="auto", binds=["0", "1"],
                        overrides={"max_num_seqs": 4, "block_size": 32})
    assert [(s.kv_cache_dtype, s.max_num_seqs, s.block_size) for s in specs] == [("auto", 4, 32)] * 2


@pytest.mark.parametrize(("kwargs", "error"), [
    (dict(overrides={"nope": 1}), "^overrides: unknown WorkerSpec field"),
    (dict(overrides={"kv_cache_dtype": "int8"}), "^kv_cache_dtype:"),
    (dict(binds=["0"]), "^binds:"),
])
def test_build_specs_errors(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        build_specs(RUNTIME, [1, 2], **kwargs)


def test_free_ports_are_distinct() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports)




def test_build_specs_with_kv_events_give_each_worker_its_origin_as_topic() -> None:
    import json

    specs = build_specs(RUNTIME, [8101, 8102], kv_events="tcp://127.0.0.1:5557")
    configs = [json.loads(spec.kv_events_config or "{}") for spec in specs]
    assert [c["topic"] for c in configs] == ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
    assert {c["endpoint"] for c in configs} == {"tcp://127.0.0.1:5557"}
    assert all(c["enable_kv_cache_events"] and c["publisher"] == "zmq" for c in configs)
    assert build_specs(RUNTIME, [8101])[0].kv_events_config is None
