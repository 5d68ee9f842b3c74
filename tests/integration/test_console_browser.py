"""The operator's console in a real headless Chromium against a real ``kvgate serve`` and ``kvgate sim``.

Started as an operator would: two simulated vLLM workers per cluster (``python -m backends.sim``),
``kvgate serve --config FILE`` in front, the page driven through Selenium and Debian's
``chromium`` + ``chromium-driver`` (``.ci/run`` installs them). What must hold:

* without the admin key the page's data calls get 401 and the page says so;
* after signing in the page shows both clusters with their endpoints;
* Drain and Set weight on the page change what the admin API answers;
* a request sent with the ``openai`` SDK appears in Requests, and one click opens its scheduling
  explanation with the per-scorer breakdown;
* Traffic, Keys and Workers render.

Screenshots of every view go to ``bench/out/console/`` (git-ignored) for a person to look at.
``kvgate serve --processes 2`` (state in the real Redis) is checked without a browser: every
process agrees on a drain made through any of them, and ``/admin/requests`` names the process
that answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from bench import procs
from tests.support.browser import need_chromium, start_chromium
from tests.support.ops import REDIS_URL, drop_prefix, redis_prefix, toml_config

ADMIN = "adm-console-browser-secret"
CLIENT = "sk-console-browser-team"
SHOTS = Path(__file__).resolve().parents[2] / "bench" / "out" / "console"
WAIT_S = 60.0
HANDBOOK = "Tenant handbook: answer politely, cite the policy section, never guess a number. " * 30

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _config(port: int, sims: dict[str, int], state: dict[str, Any] | None = None) -> dict[str, Any]:
    clusters: dict[str, Any] = {}
    for cluster, first in sims.items():
        clusters[cluster] = {
            "tier": cluster,
            "price": {"input_per_mtok": 0.55, "output_per_mtok": 2.19} if cluster == "reasoning"
            else {"input_per_mtok": 0.10, "output_per_mtok": 0.30},
            "endpoints": [{"name": f"{cluster}-{i}", "url": f"http://127.0.0.1:{first + i}/v1", "model": f"{cluster}-model"}
                          for i in range(2)],
        }
    return {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "admin": {"api_key": ADMIN, "sync_interval_s": 0.2},
        "auth": {"keys": [{"name": "team-browser", "key": CLIENT, "budget_usd": 5.0, "rpm": 6000}]},
        "health": {"interval_s": 1.0},
        "state": state or {"backend": "memory"},
        "clusters": clusters,
        "models": {f"{c}-model": {"cluster": c} for c in sims},
    }


class Stack:
    """Simulated workers and one kvgate serve, all children in their own process groups."""

    def __init__(self, tmp: Path, state: dict[str, Any] | None = None, processes: int = 1) -> None:
        base = procs.free_port_block(5)
        self.port = base
        self.sims = {"reasoning": base + 1, "fast": base + 3}
        self.children = [
            procs.start(f"sim-{cluster}", procs.sim_command(first, 2, "instant", f"{cluster}-model", i), tmp)
            for i, (cluster, first) in enumerate(self.sims.items())
        ]
        config = tmp / "kvgate.toml"
        config.write_text(toml_config(_config(base, self.sims, state)))
        argv = procs.kvgate_command(config) + (["--processes", str(processes)] if processes > 1 else [])
        self.gateway = procs.start("kvgate", argv, tmp)
        self.children.append(self.gateway)
        self.url = f"http://127.0.0.1:{base}"

    def wait(self) -> None:
        asyncio.run(procs.wait_gateway_endpoints(self.url, self.gateway, 4, timeout_s=120))

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop(grace_s=15)

    def endpoint(self, name: str) -> dict[str, Any]:
        reply = httpx.get(f"{self.url}/admin/endpoints/{name}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        reply.raise_for_status()
        return reply.json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    need_chromium()
    running = Stack(tmp_path_factory.mktemp("console"))
    try:
        running.wait()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    driver = start_chromium()
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def _until(driver: Any, condition: Any, what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(condition, message=f"waiting for {what}")


def _retry(driver: Any, action: Any, what: str) -> Any:
    """``action(driver)`` until it works: the page redraws its tables every few seconds."""
    def attempt(d: Any) -> Any:
        try:
            return action(d) or True
        except (StaleElementReferenceException, ElementNotInteractableException):
            return False
    return _until(driver, attempt, what)


def _click(driver: Any, css: str) -> None:
    _retry(driver, lambda d: d.find_element(By.CSS_SELECTOR, css).click(), f"a click on {css}")


def _view(driver: Any, name: str) -> None:
    driver.execute_script(f"location.hash = '#{name}'")
    _until(driver, lambda d: d.execute_script("return document.body.dataset.loaded") == name, f"the {name} view")


def _shot(driver: Any, name: str) -> None:
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _sign_in(driver: Any, key: str) -> None:
    field = _until(driver, lambda d: d.find_element(By.ID, "admin-key"), "the sign-in field")
    field.clear()
    field.send_keys(key)
    driver.find_element(By.ID, "signin-button").click()


def test_without_the_admin_key_the_page_says_401(stack: Stack, browser: Any) -> None:
    browser.get(f"{stack.url}/admin/console")
    banner = _until(browser, lambda d: d.find_element(By.ID, "banner") if d.find_element(By.ID, "banner").text else None,
                    "the banner")
    assert "401" in banner.text and "Not signed in" in banner.text
    assert browser.find_element(By.ID, "app").get_attribute("hidden") is not None  # no data shown
    # the page's data call itself was refused
    status = browser.execute_script(
        "return fetch('/admin/endpoints', {credentials: 'omit'}).then(r => r.status)")
    assert status == 401
    _sign_in(browser, "not-the-admin-key")
    error = _until(browser, lambda d: d.find_element(By.ID, "signin-error") if d.find_element(By.ID, "signin-error").text else None,
                   "the sign-in error")
    assert "401" in error.text
    assert browser.execute_script("return sessionStorage.getItem('kvgate.adminKey')") is None
    _shot(browser, "signin")


def test_sign_in_shows_both_clusters_and_drain_from_the_page(stack: Stack, browser: Any) -> None:
    browser.get(f"{stack.url}/admin/console#endpoints")
    _sign_in(browser, ADMIN)
    _until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#clusters .cluster")) == 2, "two clusters")
    names = [card.get_attribute("data-cluster") for card in browser.find_elements(By.CSS_SELECTOR, "#clusters .cluster")]
    assert sorted(names) == ["fast", "reasoning"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#clusters tr[data-endpoint]")
    assert sorted(r.get_attribute("data-endpoint") for r in rows) == ["fast-0", "fast-1", "reasoning-0", "reasoning-1"]
    # the key is kept for the tab only: not in the URL, not in a cookie
    assert ADMIN not in browser.current_url and browser.get_cookies() == []
    assert browser.execute_script("return sessionStorage.getItem('kvgate.adminKey')") == ADMIN

    row = "#clusters tr[data-endpoint='fast-1']"
    _click(browser, f"{row} button.drain")
    _retry(browser, lambda d: "draining" in d.find_element(By.CSS_SELECTOR, f"{row} td.draining").text, "fast-1 draining")
    assert stack.endpoint("fast-1")["draining"] is True
    assert stack.endpoint("fast-0")["draining"] is False

    weight = "#clusters tr[data-endpoint='reasoning-0'] input.weight"

    def type_weight(d: Any) -> None:
        field = d.find_element(By.CSS_SELECTOR, weight)
        field.clear()
        field.send_keys("2.5")
        d.find_element(By.CSS_SELECTOR, "#clusters tr[data-endpoint='reasoning-0'] button.set-weight").click()
    _retry(browser, type_weight, "setting a weight")
    _until(browser, lambda _: stack.endpoint("reasoning-0")["weight"] == 2.5, "the new weight in the admin API")
    _retry(browser, lambda d: d.find_element(By.CSS_SELECTOR, weight).get_attribute("value") == "2.5", "the weight shown")
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"{row} button.undrain"), "the Undrain button")
    _shot(browser, "endpoints")
    _click(browser, f"{row} button.undrain")
    _until(browser, lambda _: stack.endpoint("fast-1")["draining"] is False, "fast-1 taking requests again")


def test_an_sdk_request_appears_in_requests_and_opens_its_explanation(stack: Stack, browser: Any) -> None:
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=CLIENT, max_retries=0)
    stream = client.chat.completions.create(
        model="fast-model", messages=[{"role": "user", "content": "What is the capital of France?"}], stream=True,
        stream_options={"include_usage": True}, max_tokens=16, extra_headers={"x-request-id": "console-sdk-1"},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
    for i in range(6):  # a little traffic on both clusters for the charts and the key's usage
        client.chat.completions.create(model="reasoning-model" if i % 2 else "auto", max_tokens=8,
                                       messages=[{"role": "user", "content": f"question {i}"}])
    for i in range(4):  # one long shared prefix: the engine's prefix cache, kvgate's prediction
        client.chat.completions.create(model="fast-model", max_tokens=4, messages=[
            {"role": "system", "content": HANDBOOK}, {"role": "user", "content": f"tenant question {i}"}])
    _view(browser, "requests")
    row = "#requests tr[data-request-id='console-sdk-1']"
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the SDK request in Requests")
    cells = _retry(browser, lambda d: d.find_element(By.CSS_SELECTOR, row).text, "the row's text")
    assert "team-browser" in cells and "fast-model" in cells and "200 success" in cells
    assert "replica" in browser.find_element(By.ID, "requests-note").text
    _shot(browser, "requests")
    _click(browser, row)
    table = _until(browser, lambda d: d.find_element(By.ID, "explain-table"), "the explanation")
    headers = [th.text for th in table.find_elements(By.CSS_SELECTOR, "th")]
    assert {"prefix", "queue", "kv-usage", "total"} <= set(headers), headers
    ranked = [tr.find_elements(By.TAG_NAME, "td")[1].text for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert sorted(ranked) == ["fast-0", "fast-1"]
    assert "Route selection" in browser.find_element(By.ID, "explain-body").text
    _shot(browser, "explanation")
    browser.find_element(By.ID, "filter-text").send_keys("no-such-request-anywhere")
    _until(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, row), "the filter hiding the row")
    browser.find_element(By.ID, "filter-text").clear()


def test_traffic_keys_and_workers_render(stack: Stack, browser: Any) -> None:
    _view(browser, "traffic")
    # two samples of /metrics, five seconds apart, make the first points of the charts
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#charts polyline"), "a chart line")
    charts = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#charts h3")]
    assert "Requests per second" in charts and "TTFT (streams)" in charts and "E2E latency" in charts
    # the page's quantiles are Prometheus' histogram_quantile over bucket increases
    quantiles = browser.execute_script("""
        const C = window.KvgateCharts;
        const before = C.parseMetrics('h_bucket{le="0.1"} 10\\nh_bucket{le="0.2"} 10\\nh_bucket{le="+Inf"} 10\\n');
        const after = C.parseMetrics('h_bucket{le="0.1"} 60\\nh_bucket{le="0.2"} 110\\nh_bucket{le="+Inf"} 110\\n');
        return [0.5, 0.75, 0.99].map((p) => C.quantileOf("h", p)(before, after));
    """)
    assert quantiles == pytest.approx([0.1, 0.15, 0.198])
    routes = browser.find_element(By.ID, "routes-table").text
    assert "auto" in routes and "reasoning-model" in routes
    _shot(browser, "traffic")
    _view(browser, "keys")
    keys = browser.find_element(By.ID, "keys-table").text
    assert "team-browser" in keys and "$5 / month" in keys
    _shot(browser, "keys")
    _view(browser, "endpoints")  # after the shared-prefix requests: hit rates, engine and kvgate's side by side

    def hit_rates(d: Any) -> list[tuple[str, str, str]] | None:
        rows = [tuple(r.find_element(By.CSS_SELECTOR, f"td.hit-{kind}").text for kind in ("engine", "reported", "predicted"))
                for r in d.find_elements(By.CSS_SELECTOR, "#clusters .cluster[data-cluster='fast'] tr[data-endpoint]")]
        return rows if any(row[0] not in ("–", "0.0 %") for row in rows) else None
    rates = _retry(browser, hit_rates, "a prefix-cache hit rate on the fast cluster")
    assert any(reported not in ("–", "0.0 %") and predicted not in ("–", "0.0 %") for _, reported, predicted in rates), rates
    _shot(browser, "endpoints-prefix")
    _view(browser, "workers")
    assert "supervises no workers" in browser.find_element(By.ID, "workers-table").text
    _shot(browser, "workers")


def test_a_refused_key_mid_session_signs_out(stack: Stack, browser: Any) -> None:
    browser.execute_script("sessionStorage.setItem('kvgate.adminKey', 'revoked-key'); location.hash = '#keys';")
    banner = _until(browser, lambda d: d.find_element(By.ID, "banner") if "401" in d.find_element(By.ID, "banner").text else None,
                    "the 401 banner")
    assert "refused" in banner.text
    assert browser.find_element(By.ID, "signin").get_attribute("hidden") is None


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(p) for p in f.read().split()}


def test_several_processes_share_the_drain_and_name_the_replica(tmp_path: Path) -> None:
    prefix = redis_prefix()
    running = Stack(tmp_path, state={"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix}, processes=2)
    try:
        running.wait()
        headers = {"Authorization": f"Bearer {ADMIN}"}
        deadline = time.monotonic() + 60
        while len(_children(running.gateway.process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = _children(running.gateway.process.pid)
        httpx.post(f"{running.url}/admin/endpoints/fast-0/drain", headers=headers, timeout=10).raise_for_status()
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as fresh:  # a new connection each time
                answer = fresh.get(f"{running.url}/admin/requests", headers=headers, timeout=10).json()
                view = fresh.get(f"{running.url}/admin/endpoints/fast-0", headers=headers, timeout=10).json()
            assert answer["replica"]["pid"] in pids
            seen.add(answer["replica"]["pid"])
            if view["draining"] is not True:  # a process that has not synced yet: wait for it
                time.sleep(0.2)
                continue
            if len(seen) == 2:
                break
        assert len(seen) == 2, f"only {seen} of {pids} answered"
        for _ in range(10):
            with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as fresh:
                assert fresh.get(f"{running.url}/admin/endpoints/fast-0", headers=headers, timeout=10).json()["draining"]
    finally:
        running.stop()
        drop_prefix(prefix)
