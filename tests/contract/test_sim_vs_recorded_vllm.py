"""The simulator against the recorded real vLLM-CPU worker: same shapes, metrics, cached tokens.

The simulator runs the ``vllm-cpu`` preset (128-token blocks, 2,048-token context, SmolLM2's
chat template) with zero latency and a virtual clock; the real side is the recording in
``data/vllm_cpu_recorded.json`` (chat, completions, tokenize, metrics) and ``data/vllm_cpu_apis/``
(Responses, Messages, embeddings; compared by ``api_checks.py``). ``tests/e2e/test_sim_contract.py``
repeats the first comparison against a live worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import pytest_asyncio

from backends.sim.clock import ManualClock
from backends.sim.latency import LatencyModel
from backends.sim.presets import get_preset
from backends.sim.server import serve
from backends.sim.worker import SimConfig, SimWorker
from tests.contract import api_checks, checks, vllm_apis
from tests.contract.vllm_surface import Recorded, load_recorded, record

MODEL = "smollm2"


INSTANT = get_preset("vllm-cpu").with_overrides(latency=LatencyModel(0.0, 0.0, 0.0))


async def _played(
    config: SimConfig, play: Callable[[httpx.AsyncClient], Awaitable[dict[str, Recorded]]]
) -> dict[str, Recorded]:
    """One simulated worker of ``config`` on a loopback port, ``play``ed against, then stopped."""
    runners = await serve([SimWorker(config, ManualClock())], "127.0.0.1", 0)
    port = runners[0].addresses[0][1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            return await play(client)
    finally:
        for runner in runners:
            await runner.cleanup()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sim_recorded() -> AsyncIterator[dict[str, Recorded]]:
    yield await _played(SimConfig(model=MODEL, preset=INSTANT), lambda client: record(client, MODEL))


@pytest.fixture(scope="module")
def real() -> dict[str, Recorded]:
    return load_recorded()


@pytest.mark.parametrize("name", checks.SAME_SHAPE)
def test_same_status_and_shape(name: str, sim_recorded: dict[str, Recorded],
                               real: dict[str, Recorded]) -> None:
    checks.same_status_and_shape(real[name], sim_recorded[name])


@pytest.mark.parametrize("name", checks.STREAMS)
def test_same_stream_shapes(name: str, sim_recorded: dict[str, Recorded],
                            real: dict[str, Recorded]) -> None:
    checks.same_stream(real[name], sim_recorded[name])


@pytest.mark.parametrize("name", checks.ERRORS)
def test_same_errors(name: str, sim_recorded: dict[str, Recorded], real: dict[str, Recorded]) -> None:
    checks.same_error(real[name], sim_recorded[name])


@pytest.mark.parametrize("name", checks.TOKENIZE)
def test_similar_token_counts(name: str, sim_recorded: dict[str, Recorded],
                              real: dict[str, Recorded]) -> None:
    checks.similar_count(real[name], sim_recorded[name])


def test_cached_tokens_behave_alike(sim_recorded: dict[str, Recorded],
                                    real: dict[str, Recorded]) -> None:
    for side in (real, sim_recorded):
        checks.cached_tokens_behaviour(side, block_size=128)


def test_metric_names_and_labels(sim_recorded: dict[str, Recorded], real: dict[str, Recorded]) -> None:
    checks.same_metrics(real["metrics"].text, sim_recorded["metrics"].text)


def test_health_is_200_with_an_empty_body(sim_recorded: dict[str, Recorded]) -> None:
    assert (sim_recorded["health"].status, sim_recorded["health"].text) == (200, "")


# --- Responses, Messages, embeddings (issue 19): data/vllm_cpu_apis/, script in vllm_apis.py ---------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sim_apis() -> AsyncIterator[dict[str, Recorded]]:
    yield await _played(SimConfig(model=MODEL, preset=INSTANT), lambda client: vllm_apis.play(client, MODEL))


@pytest.fixture(scope="module")
def real_apis() -> dict[str, Recorded]:
    return vllm_apis.load()


@pytest.mark.parametrize("name", [name for name, *_ in vllm_apis.script(MODEL)])
def test_api_same_status(name: str, sim_apis: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    assert sim_apis[name].status == real_apis[name].status


@pytest.mark.parametrize("name", api_checks.SAME_SHAPE)
def test_api_same_shape(name: str, sim_apis: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    api_checks.same_shape(real_apis[name], sim_apis[name])


@pytest.mark.parametrize("name", api_checks.STREAMS)
def test_api_same_stream_events(name: str, sim_apis: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    api_checks.same_typed_stream(real_apis[name], sim_apis[name])


@pytest.mark.parametrize("name", api_checks.ERRORS)
def test_api_same_errors(name: str, sim_apis: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    api_checks.same_api_error(real_apis[name], sim_apis[name])


def test_api_usage_reads_alike(sim_apis: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    for side in (real_apis, sim_apis):
        api_checks.usage_behaviour(side)


# --- the pooling worker (``--runner pooling --convert embed``) vs ``kvgate sim --task embed`` ----------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sim_pooling() -> AsyncIterator[dict[str, Recorded]]:
    config = SimConfig(model=vllm_apis.POOL_MODEL, preset=INSTANT, task="embed", embedding_dim=vllm_apis.POOL_DIM)
    yield await _played(config, lambda client: vllm_apis.play_pooling(client, vllm_apis.POOL_MODEL))


@pytest.mark.parametrize("name", [name for name, *_ in vllm_apis.pooling_script(vllm_apis.POOL_MODEL)])
def test_pooling_same_status(name: str, sim_pooling: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    assert sim_pooling[name].status == real_apis[name].status


@pytest.mark.parametrize("name", api_checks.POOL_SAME_SHAPE)
def test_pooling_same_shape(name: str, sim_pooling: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    api_checks.same_shape(real_apis[name], sim_pooling[name])


@pytest.mark.parametrize("name", api_checks.POOL_ERRORS)
def test_pooling_same_errors(name: str, sim_pooling: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    real_body, sim_body = real_apis[name].json(), sim_pooling[name].json()
    assert api_checks.shape(sim_body) == api_checks.shape(real_body)
    assert sim_body["error"]["type"] == real_body["error"]["type"]
    assert sim_body["error"]["message"] == real_body["error"]["message"]


def test_pooling_vectors_read_alike(sim_pooling: dict[str, Recorded], real_apis: dict[str, Recorded]) -> None:
    for side in (real_apis, sim_pooling):
        api_checks.pooled_vectors(side, vllm_apis.POOL_DIM)
