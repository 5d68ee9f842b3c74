"""Tests for backends.workers.spec beyond validation (which test_vllm_args covers)."""

from __future__ import annotations

import dataclasses

import pytest

from backends.workers.spec import WorkerSpec


def _spec(**changes: object) -> WorkerSpec:
    fields = dict(model="m", served_model_name="m", port=8001, cpu_kvcache_space_gib=1)
    return WorkerSpec(**{**fields, **changes})  # type: ignore[arg-type]


def test_defaults_follow_kvgate_policy() -> None:
    spec = _spec()
    assert (spec.kv_cache_dtype, spec.enable_prefix_caching, spec.enable_chunked_prefill) == ("fp8", True, True)
    assert (spec.host, spec.device, spec.launcher, spec.tensor_parallel_size) == ("127.0.0.1", "cpu", "module", 1)


@pytest.mark.parametrize(("host", "origin"), [
    ("127.0.0.1", "http://127.0.0.1:8001"),
    ("::1", "http://[::1]:8001"),
])
def test_urls(host: str, origin: str) -> None:
    spec = _spec(host=host)
    assert spec.origin == origin
    assert spec.base_url == origin + "/v1"


def test_is_frozen_and_extra_args_become_a_tuple() -> None:
    spec = _spec(extra_args=["--a"])
    assert spec.extra_args == ("--a",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.port = 1  # type: ignore[misc]


def test_replace_revalidates() -> None:
    with pytest.raises(ValueError, match="^kv_cache_dtype:"):
        dataclasses.replace(_spec(), kv_cache_dtype="int8")
