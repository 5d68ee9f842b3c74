"""[io] kvgate's HTTP stack with no gateway logic: the floor under kvgate's CPU per request.

The same parts kvgate's inference fast path stands on, and nothing else: uvicorn's httptools
protocol with an ASGI-free request cycle (as ``gateway/api/server.py``), kvgate's native upstream
client (``gateway/upstream/native.py``), uvloop and the tuned garbage collector
(``gateway.api.serving.tune_gc``). Each ``POST`` body is forwarded as is to one upstream and the answer
written back with its status and content type; no auth, parsing, routing, metrics or accounting.
What kvgate costs above this row is its own Python logic; what this row costs is the floor
(sockets, event loop, HTTP parsing) that only a different server and client stack can move.

    python -m bench.overhead.floor_proxy --port P --upstream http://127.0.0.1:U/v1/chat/completions
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from gateway.api.serving import tune_gc
from gateway.config import UpstreamSettings
from gateway.upstream.native import NativeUpstream

UPSTREAM: dict[str, Any] = {}


class ForwardCycle(RequestResponseCycle):
    async def run_asgi(self, app: Any) -> None:
        try:
            while self.more_body and not self.disconnected:
                self.flow.resume_reading()
                await self.message_event.wait()
                self.message_event.clear()
            body = bytes(self.body)
            client: NativeUpstream = UPSTREAM["client"]
            response = await client.post(UPSTREAM["url"], body, {"Content-Type": "application/json"}, 5.0)
            data = await response.read()
            content_type = response.headers.get("content-type", "application/json").encode("latin-1")
            self.transport.write(b"".join((
                STATUS_LINE[response.status], b"content-type: ", content_type,
                b"\r\ncontent-length: ", str(len(data)).encode(), b"\r\n\r\n", data,
            )))
            self.response_started = self.response_complete = True
            self.message_event.set()
            self.on_response()
        finally:
            self.on_response = lambda: None


class ForwardProtocol(HttpToolsProtocol):
    def on_headers_complete(self) -> None:
        if self.parser.get_method() != b"POST":
            super().on_headers_complete()
            return
        self.scope["method"] = "POST"
        existing = self.cycle
        self.cycle = ForwardCycle(
            scope=self.scope, transport=self.transport, flow=self.flow, logger=self.logger,
            access_logger=self.access_logger, access_log=False, default_headers=[],
            message_event=asyncio.Event(), expect_100_continue=False,
            keep_alive=self.parser.should_keep_alive(), on_response=self.on_response_complete,
        )
        if existing is None or existing.response_complete:
            self._start_asgi_task(self.cycle, self.app)
        else:
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, self.app))


async def not_found(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


class _Server(uvicorn.Server):
    async def startup(self, sockets: Any = None) -> None:
        UPSTREAM["client"] = NativeUpstream(UpstreamSettings())
        await super().startup(sockets=sockets)
        tune_gc()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="URL every POST is forwarded to")
    args = parser.parse_args()
    UPSTREAM["url"] = args.upstream
    config = uvicorn.Config(not_found, host="127.0.0.1", port=args.port, http=ForwardProtocol, log_level="warning",
                            access_log=False, lifespan="on")
    uvloop.run(_Server(config).serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
