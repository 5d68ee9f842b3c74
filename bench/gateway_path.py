"""kvgate's own CPU per request, without the network: the ASGI app driven in-process.

A canned upstream (the :class:`~gateway.upstream.client.Upstream` seam, no sockets) answers every
request at once, and the handler ``kvgate serve`` runs per request (``Proxy.handle``, as
``gateway/api/server.py`` calls it; ``--asgi``: the ASGI app with scope/receive/send), so the figure is
the gateway's Python work alone: parsing, auth, route selection, scheduling (prefix hashing),
the attempt loop, metrics and accounting. uvicorn's HTTP parsing and aiohttp's client are left
out (see bench/overhead for the end-to-end figure). ``--profile`` prints cProfile's top entries.
``--admission both`` (the default) runs the same requests with ``[admission]`` off and on (nothing
saturated: every request is admitted at once) in alternating rounds and prints a table of both and
the difference, the per-request cost of admission when nothing is saturated (issue 21: <= 5 us).
``--model auto`` sends every request to ``auto`` over two tiered clusters (``reasoning`` and
``fast``, the endpoints split between them), so the figure includes route selection's signals,
classifier and policy; compare it with the default (a public model name on one cluster).
``--opcodes N``: instead of timing, count the Python bytecodes executed and the Python calls made per
request over N requests (``sys.settrace`` with opcode events; C code such as orjson or dict methods is
not counted): a deterministic measure of the Python work, the same on a loaded machine as on a quiet
one, for comparing two trees (``PYTHONPATH=TREE``); ``--opcodes-top K`` also lists the K functions
executing the most opcodes.

    .venv/bin/python bench/gateway_path.py [--requests 20000] [--endpoints 4] [--model m|auto] [--profile] [--stream]
        [--asgi] [--redis-url URL [--state-mode mirror|direct]] [--key-rpm N] [--admission both|on|off] [--rounds 3]
        [--opcodes 300 [--opcodes-top 40]]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import collections
import json
import pstats
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.app import create_app  # noqa: E402
from gateway.api.serving import tune_gc  # noqa: E402
from gateway.protocol.openai import Operation  # noqa: E402
from gateway.config import build_settings  # noqa: E402

BODY = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi " * 20}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}}).encode()
STREAM = b"".join(
    b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"w"},"finish_reason":null}]}\n\n'
    for _ in range(20)
) + b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":300,"completion_tokens":20,"total_tokens":320}}\n\ndata: [DONE]\n\n'


class CannedResponse:
    def __init__(self, stream: bool) -> None:
        self.status = 200
        self.headers = {"content-type": "text/event-stream" if stream else "application/json"}
        self._chunks = [STREAM[i:i + 400] for i in range(0, len(STREAM), 400)] if stream else []

    async def read(self) -> bytes:
        return BODY

    async def next_chunk(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    def close(self) -> None: ...

    def release(self) -> None: ...


class CannedUpstream:
    def __init__(self) -> None:
        self.stream = False

    async def post(self, url: str, body: bytes, headers: Any, connect_timeout_s: float) -> CannedResponse:
        return CannedResponse(self.stream)

    async def probe(self, url: str, timeout_s: float) -> int:
        return 200

    async def aclose(self) -> None: ...


async def drive(app: Any, body: bytes, n: int) -> None:
    scope_base = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                  "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                  "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8080),
                  "headers": [(b"host", b"x"), (b"content-type", b"application/json"), (b"authorization", b"Bearer sk-bench"),
                              (b"content-length", str(len(body)).encode())]}
    for _ in range(n):
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        status = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif not message.get("more_body"):
                done.set()

        await app(dict(scope_base), receive, send)
        assert status == [200], status


async def drive_core(app: Any, body: bytes, n: int, stream: bool) -> None:
    """What ``kvgate serve`` runs per request (gateway/api/server.py): the handler on a dict of headers."""
    container = app.state.container
    headers = {"host": "x", "content-type": "application/json", "authorization": "Bearer sk-bench",
               "content-length": str(len(body))}

    async def watch(work: Any) -> Any:
        return await work

    async def send(message: Any) -> None: ...

    async def receive() -> Any:
        await asyncio.sleep(3600)

    for _ in range(n):
        key = container.ops.gate.authenticate(headers.get("authorization"))
        state = types.SimpleNamespace(request_id="r")
        reply, _ = await container.proxy.handle(Operation.CHAT, headers, body, state, watch, key)
        if stream:
            await reply({"type": "http"}, receive, send)
        else:
            reply.settle()


def clusters(model: str, endpoints: int) -> dict[str, Any]:
    """One untiered cluster ``fast`` (model ``m``), or for ``auto`` a reasoning and a fast cluster."""
    urls = [f"http://127.0.0.1:{9000 + i}/v1" for i in range(endpoints)]
    if model != "auto":
        return {"fast": {"endpoints": [{"url": url, "model": "m"} for url in urls]}}
    half = max(1, endpoints // 2)
    return {
        "fast": {"tier": "fast", "endpoints": [{"url": url, "model": "m"} for url in urls[:half]]},
        "deep": {"tier": "reasoning", "endpoints": [{"url": url, "model": "r"} for url in urls[half:] or urls[:1]]},
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-out", help="with --profile: also write the cProfile stats to this file (pstats)")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--endpoints", type=int, default=4, help="endpoints in the cluster (bench/overhead runs 1)")
    parser.add_argument("--asgi", action="store_true",
                        help="drive the ASGI app (its door to the edge) instead of the handler `kvgate serve` calls")
    parser.add_argument("--model", default="m", choices=("m", "auto"),
                        help="m: a public model on one cluster; auto: route selection over reasoning and fast clusters")
    parser.add_argument("--redis-url", help="state backend redis at this URL (default: memory), e.g. redis://127.0.0.1:6379/15")
    parser.add_argument("--state-mode", default="mirror", choices=("mirror", "direct"),
                        help="with --redis-url: [state] mode (mirror: lookups from the local mirror; direct: a round trip each)")
    parser.add_argument("--key-rpm", type=int, help="the client key gets this requests-per-minute limit (quotas: "
                        "with --redis-url, an admission script in Redis per request)")
    parser.add_argument("--admission", default="both", choices=("both", "on", "off"),
                        help="[admission] enabled: both (a table of off, on and the difference), on or off")
    parser.add_argument("--rounds", type=int, default=3, help="with --admission both: alternating rounds of each")
    parser.add_argument("--opcodes", type=int, metavar="N", help="count opcodes and calls per request over N requests")
    parser.add_argument("--opcodes-top", type=int, default=0, metavar="K", help="with --opcodes: the K busiest functions")
    args = parser.parse_args()
    if args.opcodes:
        return await count_opcodes(args)
    modes = ("off", "on") if args.admission == "both" else (args.admission,)
    rounds = args.rounds if args.admission == "both" else 1
    figures: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            figures[mode].append(await measure(args, mode == "on"))
    state = f"redis {args.state_mode}" if args.redis_url else "memory"
    state += f", key rpm {args.key_rpm}" if args.key_rpm else ""
    label = f"{'stream' if args.stream else 'non-stream'}, model {args.model}, state {state}, {args.endpoints} endpoint(s)"
    best = {mode: min(values) for mode, values in figures.items()}  # least disturbed by the shared machine
    print(f"{label}: us CPU per request (gateway Python only, {args.requests} requests per round; min over "
          f"{rounds} round(s), all rounds in brackets)")
    print("| admission | us/request | rounds |\n|---|---:|---|")
    for mode, values in figures.items():
        print(f"| {mode} | {best[mode]:.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    if len(modes) == 2:
        print(f"| on - off | {best['on'] - best['off']:+.1f} | "
              f"{', '.join(f'{b - a:+.1f}' for a, b in zip(figures['off'], figures['on'], strict=True))} |")
    if "on" in modes:
        step = [await admission_step(args) for _ in range(rounds)]
        print(f"| admission step alone (Proxy.admit + lease hold/drop x2, 100,000 calls) | {min(step):.2f} | "
              f"{', '.join(f'{v:.2f}' for v in step)} |")
    return 0


async def admission_step(args: argparse.Namespace, calls: int = 100_000) -> float:
    """us CPU of what admission adds to one unsaturated request: ``Proxy.admit`` on the arguments of a real
    request (captured from one through the app), then the lease's hold and drops (an attempt and the
    exchange), as the director and ``attempt.py`` call them. The whole-path difference above is this
    plus noise; on a shared machine the noise is tens of us, this is the figure the goal is about."""
    upstream = CannedUpstream()
    settings = build_settings({"auth": {"api_keys": ["sk-bench"]}, "clusters": clusters(args.model, args.endpoints),
                               "models": {"m": {"cluster": "fast"}}, "admission": {"enabled": True}})
    app = create_app(settings, upstream=upstream, health_checks=False)
    body = json.dumps({"model": args.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}).encode()
    seen: list[tuple[Any, ...]] = []
    async with app.router.lifespan_context(app):
        proxy = app.state.container.proxy
        real = proxy.admit

        async def capture(*call: Any) -> Any:
            seen.append(call)
            return await real(*call)

        proxy.admit = capture
        await drive_core(app, body, 1, False)
        proxy.admit = real
        call = seen[0]
        exchange = call[1]
        started = time.process_time()
        for _ in range(calls):
            await real(*call)
            lease = exchange.lease
            lease.hold()
            lease.drop()
            lease.drop()
        return (time.process_time() - started) / calls * 1e6


async def count_opcodes(args: argparse.Namespace) -> int:
    """``--opcodes``: Python opcodes and calls per request (admission off unless ``--admission on``)."""
    upstream = CannedUpstream()
    upstream.stream = args.stream
    settings = build_settings({"auth": {"api_keys": ["sk-bench"]}, "clusters": clusters(args.model, args.endpoints),
                               "models": {"m": {"cluster": "fast"}}, "admission": {"enabled": args.admission == "on"}})
    app = create_app(settings, upstream=upstream, health_checks=False)
    prompt = "You are a helpful assistant. " * 40
    body = json.dumps({"model": args.model, "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}],
                       "max_tokens": 20, "stream": args.stream}).encode()
    ops: collections.Counter[str] = collections.Counter()
    calls = 0

    def trace(frame: types.FrameType, event: str, arg: Any) -> Any:
        nonlocal calls
        if event == "call":
            calls += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            code = frame.f_code
            ops[f"{code.co_qualname} ({Path(code.co_filename).name})"] += 1
        return trace

    async with app.router.lifespan_context(app):
        await drive_core(app, body, 500, args.stream)  # warm-up: memos, pools, first-use paths
        sys.settrace(trace)
        try:
            await drive_core(app, body, args.opcodes, args.stream)
        finally:
            sys.settrace(None)
    n = args.opcodes
    print(f"{'stream' if args.stream else 'non-stream'}, model {args.model}, {args.endpoints} endpoint(s): "
          f"{sum(ops.values()) / n:.0f} Python opcodes and {calls / n:.1f} Python calls per request ({n} requests; "
          f"the driver's own loop included)")
    for name, count in ops.most_common(args.opcodes_top):
        print(f"{count / n:8.1f}  {name}")
    return 0


async def measure(args: argparse.Namespace, admission: bool) -> float:
    """One round: a fresh app (``[admission] enabled = admission``), warmed up; us CPU per request."""
    upstream = CannedUpstream()
    upstream.stream = args.stream
    settings = build_settings({
        "auth": ({"keys": [{"name": "bench", "key": "sk-bench", "rpm": args.key_rpm}]} if args.key_rpm
                 else {"api_keys": ["sk-bench"]}),
        "clusters": clusters(args.model, args.endpoints),
        "models": {"m": {"cluster": "fast"}},
        "admission": {"enabled": admission},
        **({"state": {"backend": "redis", "redis_url": args.redis_url, "key_prefix": f"kvgate-gp-{time.time_ns()}:",
                      "mode": args.state_mode}}
           if args.redis_url else {}),
    })
    app = create_app(settings, upstream=upstream, health_checks=False)
    prompt = "You are a helpful assistant. " * 40
    body = json.dumps({"model": args.model, "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}],
                       "max_tokens": 20, "stream": args.stream}).encode()
    async with app.router.lifespan_context(app):
        run = (lambda n: drive(app, body, n)) if args.asgi else (
            lambda n: drive_core(app, body, n, args.stream))
        await run(500)  # warm-up
        tune_gc()  # as `kvgate serve` after start-up
        profiler = cProfile.Profile() if args.profile else None
        started_cpu = time.process_time()
        if profiler:
            profiler.enable()
        await run(args.requests)
        if profiler:
            profiler.disable()
        cpu = time.process_time() - started_cpu
    if profiler:
        print(f"admission {'on' if admission else 'off'}:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        if args.profile_out:
            profiler.dump_stats(args.profile_out)
    return cpu / args.requests * 1e6


if __name__ == "__main__":
    import uvloop  # as `kvgate serve`

    sys.exit(uvloop.run(main()))
