"""Which upstream HTTP client should kvgate use? CPU time per proxied request, side by side.

Starts one cheap fake upstream (aiohttp, fixed chat-completion body), then, one at a time and
alternating rounds, three proxies in front of it, each a separate uvicorn process pinned to core 0:

    fastapi+httpx     a minimal FastAPI handler forwarding with ``httpx.AsyncClient``
    fastapi+aiohttp   the same handler forwarding with ``aiohttp.ClientSession``
    fastapi+native    the same handler forwarding with kvgate's ``NativeUpstream`` (gateway/upstream/native.py)
    kvgate            the real gateway (``create_app``), default settings, one endpoint

The load generator (aiohttp client, pinned to core 1 with the upstream) sends N non-streaming
chat requests at concurrency C to each proxy. The figure that survives a noisy machine is the
proxy process's CPU time (user+system, from /proc) divided by the requests it served.

    .venv/bin/python bench/upstream_client.py [--requests 3000] [--concurrency 32] [--rounds 3] [--json]
"""



import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

BODY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello " * 20}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
    }
).encode()
REQUEST = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 50}], "max_tokens": 20}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- roles run in child processes -------------------------------------------------------------


def run_upstream(port: int) -> None:
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=BODY, content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def minimal_proxy(kind: str, upstream: str):  # type: ignore[no-untyped-def]
    import contextlib

    from fastapi import FastAPI, Request, Response

    state: dict[str, object] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        if kind == "httpx":
            import httpx

            state["client"] = httpx.AsyncClient(limits=httpx.Limits(max_connections=256), timeout=60)
        elif kind == "native":
            from gateway.config import UpstreamSettings
            from gateway.upstream.native import NativeUpstream

            state["client"] = NativeUpstream(UpstreamSettings(pool_size=256))
        else:
            import aiohttp

            state["client"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
        yield
        await state["client"].close() if kind == "aiohttp" else await state["client"].aclose()  # type: ignore[attr-defined]

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.body()
        client = state["client"]
        url = upstream + "/chat/completions"
        headers = {"content-type": "application/json"}
        if kind == "httpx":
            reply = await client.post(url, content=body, headers=headers)  # type: ignore[attr-defined]
            return Response(reply.content, reply.status_code, media_type="application/json")
        if kind == "native":
            answer = await client.post(url, body, headers, 5.0)  # type: ignore[attr-defined]
            return Response(await answer.read(), answer.status, media_type="application/json")
        async with client.post(url, data=body, headers=headers) as reply:  # type: ignore[attr-defined]
            return Response(await reply.read(), reply.status, media_type="application/json")

    return app


def run_proxy(kind: str, port: int, upstream: str) -> None:
    import uvicorn

    if kind == "kvgate":
        from gateway.app import create_app
        from gateway.config import build_settings

        settings = build_settings(
            {"clusters": {"fast": {"endpoints": [{"url": upstream, "model": "m"}]}}, "models": {"m": {"cluster": "fast"}}}
        )
        from gateway.api.server import uvicorn_config

        config = uvicorn_config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", access_log=False)
        uvicorn.Server(config).run()  # kvgate's own protocol, as `kvgate serve`
        return
    uvicorn.run(minimal_proxy(kind, upstream), host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---- the driver -------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spawn(args: list[str], core: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["taskset", "-c", str(core), sys.executable, __file__, *args], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})


async def wait_ready(url: str) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(url) as response:
                    if response.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} never answered")


async def load(url: str, requests: int, concurrency: int) -> list[float]:
    import aiohttp

    latencies: list[float] = []
    remaining = requests
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                async with session.post(url, data=REQUEST, headers={"content-type": "application/json"}) as response:
                    await response.read()
                    assert response.status == 200, response.status
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def measure(kind: str, upstream: str, requests: int, concurrency: int) -> dict[str, float]:
    port = free_port()
    proxy = spawn(["--role", "proxy", "--kind", kind, "--port", str(port), "--upstream", upstream], core=0)
    try:
        base = f"http://127.0.0.1:{port}"
        asyncio.run(wait_ready(base + "/health" if kind == "kvgate" else base + "/docs"))
        asyncio.run(load(base + "/v1/chat/completions", 200, concurrency))  # warm-up
        before = cpu_seconds(proxy.pid)
        started = time.perf_counter()
        latencies = asyncio.run(load(base + "/v1/chat/completions", requests, concurrency))
        wall = time.perf_counter() - started
        cpu = cpu_seconds(proxy.pid) - before
    finally:
        proxy.terminate()
        proxy.wait(10)
    latencies.sort()
    return {
        "cpu_us_per_request": cpu / requests * 1e6,
        "requests_per_s": requests / wall,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=("driver", "upstream", "proxy"), default="driver")
    parser.add_argument("--kind", default="kvgate")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", default="")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.role == "upstream":
        run_upstream(args.port)
        return 0
    if args.role == "proxy":
        run_proxy(args.kind, args.port, args.upstream)
        return 0
    os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
    upstream_port = free_port()
    upstream_proc = spawn(["--role", "upstream", "--port", str(upstream_port)], core=1)
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    kinds = ("fastapi+httpx", "fastapi+aiohttp", "fastapi+native", "kvgate")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    try:
        asyncio.run(wait_ready(f"http://127.0.0.1:{upstream_port}/health"))
        for _ in range(args.rounds):
            for kind in kinds:
                internal = {"fastapi+httpx": "httpx", "fastapi+aiohttp": "aiohttp", "fastapi+native": "native", "kvgate": "kvgate"}[kind]
                results[kind].append(measure(internal, upstream, args.requests, args.concurrency))
    finally:
        upstream_proc.terminate()
        upstream_proc.wait(10)
    rows = []
    for kind, runs in results.items():
        cpu = [run["cpu_us_per_request"] for run in runs]
        rows.append(
            {
                "proxy": kind,
                "cpu_us_per_request_median": statistics.median(cpu),
                "cpu_us_per_request_min": min(cpu),
                "cpu_us_per_request_max": max(cpu),
                "requests_per_s_median": statistics.median(run["requests_per_s"] for run in runs),
                "p50_ms_median": statistics.median(run["p50_ms"] for run in runs),
                "p99_ms_median": statistics.median(run["p99_ms"] for run in runs),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"non-streaming chat, {args.requests} requests x {args.rounds} rounds, concurrency {args.concurrency}; proxy on core 0")
    print(f"{'proxy':<18}{'CPU us/req (median, min-max)':>32}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
    for row in rows:
        spread = f"{row['cpu_us_per_request_median']:.0f} ({row['cpu_us_per_request_min']:.0f}-{row['cpu_us_per_request_max']:.0f})"
        print(f"{row['proxy']:<18}{spread:>32}{row['requests_per_s_median']:>9.0f}{row['p50_ms_median']:>9.2f}{row['p99_ms_median']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
