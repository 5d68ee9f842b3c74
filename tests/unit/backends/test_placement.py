"""Pure placement: TP groups on GPUs, core ranges on CPU, ports, specs."""

from __future__ import annotations

import dataclasses

import pytest

from backends.gpus import Gpu
from backends.placement import Placement, PlacementError, cpu_binds, gpu_groups, place, worker_specs
from backends.workers.vllm_args import worker_env

GPUS8 = [Gpu(i, "H100", 81559, 0) for i in range(8)]


@pytest.mark.parametrize(("gpus", "tp", "count", "groups"), [
    (8, 1, None, [(i,) for i in range(8)]),
    (8, 2, None, [(0, 1), (2, 3), (4, 5), (6, 7)]),
    (8, 4, 1, [(0, 1, 2, 3)]),
    (8, 8, None, [tuple(range(8))]),
    (4, 2, 2, [(0, 1), (2, 3)]),
    (3, 2, None, [(0, 1)]),
])
def test_gpu_groups(gpus: int, tp: int, count: int | None, groups: list[tuple[int, ...]]) -> None:
    assert gpu_groups(GPUS8[:gpus], tp, count) == groups


def test_gpu_groups_follow_indices_not_list_order() -> None:
    shuffled = [GPUS8[3], GPUS8[0], GPUS8[2], GPUS8[1]]
    assert gpu_groups(shuffled, 2) == [(0, 1), (2, 3)]


@pytest.mark.parametrize(("gpus", "tp", "count"), [(8, 4, 3), (1, 2, None), (2, 1, 0), (2, 0, 1)])
def test_gpu_groups_that_do_not_fit_are_refused(gpus: int, tp: int, count: int | None) -> None:
    with pytest.raises(PlacementError):
        gpu_groups(GPUS8[:gpus], tp, count)


@pytest.mark.parametrize(("count", "cpus", "binds"), [
    (1, 2, ["0-1"]),
    (2, 2, ["0", "1"]),
    (2, 16, ["0-7", "8-15"]),
    (3, 16, ["0-4", "5-9", "10-14"]),
    (3, 2, ["0", "1", "0"]),
    (1, 1, ["0"]),
])
def test_cpu_binds(count: int, cpus: int, binds: list[str]) -> None:
    assert cpu_binds(count, cpus) == binds


def test_place_on_gpus() -> None:
    assert place(None, gpus=GPUS8[:4], cpu_count=64, tensor_parallel_size=2, first_port=9000) == [
        Placement("worker-0", 9000, "gpu", "0,1"), Placement("worker-1", 9001, "gpu", "2,3")]


def test_place_on_cpu_without_gpus() -> None:
    assert place(2, gpus=[], cpu_count=2, ports=[8101, 8205], name_prefix="local") == [
        Placement("local-0", 8101, "cpu", cpu_omp_threads_bind="0"),
        Placement("local-1", 8205, "cpu", cpu_omp_threads_bind="1")]


def test_place_port_count_mismatch() -> None:
    with pytest.raises(PlacementError, match="ports: 1 given for 2"):
        place(2, gpus=[], cpu_count=2, ports=[1])


FIELDS = dict(model="/m", served_model_name="m", kv_cache_dtype="fp8", gpu_memory_utilization=0.9,
              tensor_parallel_size=4, cpu_kvcache_space_gib=2)


def test_worker_specs_on_gpu_drop_cpu_fields_and_set_devices() -> None:
    placements = place(None, gpus=GPUS8[:4], cpu_count=8, tensor_parallel_size=2)
    (name0, spec0), (_, spec1) = worker_specs(placements, FIELDS)
    assert name0 == "worker-0"
    assert (spec0.device, spec0.tensor_parallel_size, spec0.cuda_visible_devices, spec0.cpu_kvcache_space_gib) == ("gpu", 2, "0,1", None)
    assert worker_env(spec1, {})["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_worker_specs_on_cpu_set_kv_space_and_binds() -> None:
    specs = worker_specs(place(2, gpus=[], cpu_count=2), FIELDS)
    env = worker_env(specs[1][1], {})
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "1")
    assert specs[0][1].gpu_memory_utilization is None and specs[0][1].tensor_parallel_size == 1
    assert worker_specs(place(1, gpus=[], cpu_count=2), {"model": "/m", "served_model_name": "m"},
                        cpu_kvcache_space_gib=3)[0][1].cpu_kvcache_space_gib == 3


def test_worker_specs_refuse_unknown_fields() -> None:
    with pytest.raises(ValueError, match="^kv_dtype: not a WorkerSpec field"):
        worker_specs(place(1, gpus=[], cpu_count=2), {**FIELDS, "kv_dtype": "fp8"})


def test_workers_up_kv_events_connects_each_worker_to_the_gateway() -> None:
    import json

    from backends.workers.cli import _with_kv_events

    specs = worker_specs(place(2, gpus=[], cpu_count=2), {"model": "/m", "served_model_name": "m"})
    assert _with_kv_events(specs, None) == specs
    own = dataclasses.replace(specs[1][1], kv_events_config='{"endpoint":"tcp://*:6000"}')  # a [[workers]] table's own
    planned = _with_kv_events([specs[0], (specs[1][0], own)], "tcp://127.0.0.1:5557")
    config = json.loads(planned[0][1].kv_events_config)
    assert (config["endpoint"], config["topic"], config["enable_kv_cache_events"]) == (
        "tcp://127.0.0.1:5557", planned[0][1].origin, True)
    assert planned[1][1].kv_events_config == '{"endpoint":"tcp://*:6000"}'
    assert _with_kv_events(specs, "tcp://10.0.0.0:5557")[0][1].kv_events_config  # not mistaken for 0.0.0.0
    for bad in ("tcp://*:5557", "tcp://0.0.0.0:5557", "127.0.0.1:5557", "ipc:///tmp/kv", "tcp://[::1]:5557", "tcp://w"):
        with pytest.raises(ValueError, match="concrete tcp://host:port"):
            _with_kv_events(specs, bad)
