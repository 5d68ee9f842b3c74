"""plan_workers: CLI options + [defaults] + [[workers]] -> named, placed WorkerSpecs."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.gpus import Gpu
from backends.workers.workers_file import load_workers_file, plan_workers

BASE = {"model": "/models/smol", "served_model_name": "smollm2", "kv_cache_dtype": "fp8", "max_model_len": 2048}


def test_count_only_places_on_cpu_cores_and_ports() -> None:
    workers = plan_workers(BASE, count=2, cpu_count=2, first_port=8001)
    assert [(n, s.port, s.cpu_omp_threads_bind, s.kv_cache_dtype) for n, s in workers] == [
        ("worker-0", 8001, "0", "fp8"), ("worker-1", 8002, "1", "fp8")]


def test_file_defaults_and_per_worker_tables(tmp_path: Path) -> None:
    path = tmp_path / "workers.toml"
    path.write_text('[defaults]\nenforce_eager = true\nmax_model_len = 4096\n\n'
                    '[[workers]]\nname = "ref"\nkv_cache_dtype = "auto"\n\n[[workers]]\nport = 8105\n')
    workers = plan_workers(BASE, load_workers_file(path), count=5, cpu_count=16, first_port=8001)
    assert [(n, s.port, s.kv_cache_dtype, s.max_model_len, s.enforce_eager, s.cpu_omp_threads_bind)
            for n, s in workers] == [("ref", 8001, "auto", 4096, True, "0-7"), ("worker-1", 8105, "fp8", 4096, True, "8-15")]


def test_gpu_hosts_get_tensor_parallel_groups() -> None:
    gpus = [Gpu(i, "H100", 81559, 0) for i in range(4)]
    document = {"defaults": {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9}}
    workers = plan_workers({**BASE, "launcher": "vllm-serve"}, document, count=2, gpus=gpus)
    assert [(s.device, s.cuda_visible_devices, s.tensor_parallel_size) for _, s in workers] == [
        ("gpu", "0,1", 2), ("gpu", "2,3", 2)]


@pytest.mark.parametrize(("document", "match"), [
    ({"worker": []}, "^worker: unknown table"),
    ({"workers": [{"kv_dtype": "fp8"}]}, "^workers.worker-0.kv_dtype: not a WorkerSpec field"),
    ({"workers": [{"name": "a"}, {"name": "a"}]}, "duplicate names"),
    ({"defaults": {"kv_cache_dtype": "fp16"}}, "^kv_cache_dtype:"),
])
def test_bad_files_are_refused(document: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_workers(BASE, document, cpu_count=2)


def test_invalid_toml(tmp_path: Path) -> None:
    (tmp_path / "w.toml").write_text("[defaults\n")
    with pytest.raises(ValueError, match="w.toml"):
        load_workers_file(tmp_path / "w.toml")


def test_a_file_can_start_a_pooling_worker() -> None:
    document = {"workers": [{}, {"name": "embedder", "runner": "pooling", "convert": "embed",
                                 "served_model_name": "smollm2-embed"}]}
    (_, chat), (name, pool) = plan_workers(BASE, document)
    assert (chat.runner, chat.convert) == (None, None)
    assert (name, pool.runner, pool.convert, pool.served_model_name) == ("embedder", "pooling", "embed", "smollm2-embed")
