"""The table of APIs kvgate routes: one row per API, everything the spine needs to know about it.

Each :class:`Api` row says, for one API:

- ``method`` and ``paths`` (full paths; ``{id}`` stands for a stored response's id);
- ``parse``: body bytes (and the ``{id}``) -> the request view (:class:`InferenceRequest` for chat
  and completions, :class:`~gateway.protocol.api_request.ApiRequest` for the others), raising
  :class:`~gateway.errors.InvalidRequestError`;
- ``usage``: a buffered JSON answer -> :class:`~gateway.keys.pricing.TokenUsage` (None: none);
- ``observer``: the stream observer class (None: the API never streams); each has the
  attributes the relay reads (:class:`~gateway.protocol.sse.StreamObserver` for chat and
  completions, a :class:`~gateway.protocol.typed_events.TypedEventObserver` otherwise, whose
  ``usage`` is normalized to OpenAI's shape and whose ``error_event(message)`` is the API's own
  event for a break after content);
- ``error_body``: a :class:`~gateway.errors.GatewayError` -> the bytes of the API's error shape
  (OpenAI's everywhere but ``/v1/messages``, which has Anthropic's);
- ``continuable`` (a broken stream may be resumed on another endpoint: chat only),
  ``hashed`` (the prompt is hashed for prefix routing), ``serves`` (``generate`` or ``pooling``:
  which clusters may take it), ``state`` (``none``; ``creates``: record the answer's id ->
  endpoint; ``reads``: route by the request's ``state_id`` alone) and ``client_headers``
  (headers that carry the client's key: read, never forwarded).

:func:`match` finds the row and the ``{id}`` for a method and path; :func:`supported_paths`
lists every path (``docs/apis.md``); :func:`unknown_path` is the 404 (or 405) for any other one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gateway.errors import GatewayError, MethodNotAllowedError, NotFoundError
from gateway.keys.pricing import TokenUsage
from gateway.protocol import embeddings, messages, responses
from gateway.protocol.api_request import ApiRequest
from gateway.protocol.openai import InferenceRequest, Operation, parse_request
from gateway.protocol.sse import StreamObserver
from gateway.protocol.typed_events import TypedEventObserver

Parse = Callable[[bytes, str | None], InferenceRequest | ApiRequest]


def _openai_error(error: GatewayError) -> bytes:
    return error.body()


@dataclass(frozen=True, slots=True)
class Api:
    """One API kvgate routes (see the module docstring for each field)."""

    name: str
    method: str
    paths: tuple[str, ...]
    parse: Parse
    usage: Callable[[Any], TokenUsage | None]
    observer: type[StreamObserver] | type[TypedEventObserver] | None = None
    error_body: Callable[[GatewayError], bytes] = _openai_error
    continuable: bool = False
    hashed: bool = False
    serves: Literal["generate", "pooling"] = "generate"
    state: Literal["none", "creates", "reads"] = "none"
    client_headers: tuple[str, ...] = ()


def _body(parse: Callable[[bytes], InferenceRequest | ApiRequest]) -> Parse:
    return lambda raw, _id: parse(raw)


def _resource(api: str) -> Parse:
    def parse(_raw: bytes, response_id: str | None) -> ApiRequest:
        return responses.parse_resource(api, response_id or "")

    return parse


APIS: tuple[Api, ...] = (
    Api("chat", "POST", ("/v1/chat/completions",), _body(lambda raw: parse_request(Operation.CHAT, raw)),
        TokenUsage.from_openai, StreamObserver, continuable=True, hashed=True),
    Api("completions", "POST", ("/v1/completions",), _body(lambda raw: parse_request(Operation.COMPLETION, raw)),
        TokenUsage.from_openai, StreamObserver, hashed=True),
    Api(responses.CREATE, "POST", ("/v1/responses",), _body(responses.parse_create), responses.usage_of,
        responses.ResponsesStreamObserver, hashed=True, state="creates"),
    Api(responses.RETRIEVE, "GET", ("/v1/responses/{id}",), _resource(responses.RETRIEVE), lambda _: None,
        responses.ResponsesReadObserver, state="reads"),
    Api(responses.CANCEL, "POST", ("/v1/responses/{id}/cancel",), _resource(responses.CANCEL), lambda _: None,
        state="reads"),
    Api(responses.DELETE, "DELETE", ("/v1/responses/{id}",), _resource(responses.DELETE), lambda _: None,
        state="reads"),
    Api(messages.CREATE, "POST", ("/v1/messages",), _body(messages.parse_create), messages.usage_of,
        messages.MessagesStreamObserver, messages.error_body, hashed=True, client_headers=messages.CLIENT_HEADERS),
    Api(messages.COUNT_TOKENS, "POST", ("/v1/messages/count_tokens",), _body(messages.parse_count_tokens),
        lambda _: None, None, messages.error_body, client_headers=messages.CLIENT_HEADERS),
    Api(embeddings.EMBEDDINGS, "POST", ("/v1/embeddings",), _body(embeddings.parse_embeddings),
        embeddings.usage_of, serves="pooling"),
    Api(embeddings.RERANK, "POST", ("/v1/rerank",), _body(embeddings.parse_rerank), embeddings.usage_of,
        serves="pooling"),
    Api(embeddings.SCORE, "POST", ("/v1/score",), _body(embeddings.parse_score), embeddings.usage_of,
        serves="pooling"),
)
"""Every API, in the order the docs list them."""

@dataclass(frozen=True, slots=True)
class ApiCall:
    """One request's API, as the edge found it: the row, the path's ``{id}`` (or None), the path
    itself and the raw query string (forwarded as it came, e.g. ``?stream=true`` on a retrieve)."""

    api: Api
    ident: str | None
    path: str
    query: bytes = b""

    @property
    def upstream_path(self) -> str:
        """The path (and query) to append to an endpoint's ``base_url``."""
        tail = upstream_path(self.path)
        return tail + "?" + self.query.decode("latin-1") if self.query else tail


def call_for(method: str, path: str, query: bytes = b"") -> ApiCall | None:
    """The :class:`ApiCall` for ``method path`` (None: no API serves it)."""
    found = match(method, path)
    return None if found is None else ApiCall(found[0], found[1], path, query)


BY_NAME: dict[str, Api] = {api.name: api for api in APIS}
_EXACT: dict[tuple[str, str], Api] = {(api.method, path): api for api in APIS for path in api.paths if "{id}" not in path}
_TEMPLATED: tuple[tuple[Api, str, str], ...] = tuple(
    (api, *path.split("{id}", 1)) for api in APIS for path in api.paths if "{id}" in path
)


def match(method: str, path: str) -> tuple[Api, str | None] | None:
    """The API at ``method path`` and the ``{id}`` in the path (None without one); None if no API.

    ``path`` without its query string. An ``{id}`` spans one path segment (no ``/``).
    """
    found = _EXACT.get((method, path))
    if found is not None:
        return found, None
    for api, head, tail in _TEMPLATED:
        if api.method == method and path.startswith(head) and path.endswith(tail) and len(path) > len(head) + len(tail):
            middle = path[len(head) : len(path) - len(tail)]
            if "/" not in middle:
                return api, middle
    return None


def methods_at(path: str) -> list[str]:
    """The methods some API serves at ``path`` (for a 405's ``Allow``); empty if none."""
    return sorted({api.method for api in APIS if (found := match(api.method, path)) is not None and found[0] is api})


def upstream_path(path: str) -> str:
    """The path to append to an endpoint's ``base_url`` (which ends in ``/v1``) for a client's
    ``path``: ``/v1/responses/resp_1/cancel`` -> ``/responses/resp_1/cancel``."""
    return path[3:] if path.startswith("/v1/") else path


def supported_paths() -> list[str]:
    """``"METHOD path"`` of every API, in table order (what a 404 names)."""
    return [f"{api.method} {path}" for api in APIS for path in api.paths]



def unknown_path(method: str, path: str) -> NotFoundError | MethodNotAllowedError:
    """The error for a request no API serves: 405 (with ``Allow``) when another method is served at
    ``path``, else the 404 kvgate answers today, naming where the supported paths are listed."""
    methods = methods_at(path)
    if methods:
        return MethodNotAllowedError(f"Method {method} is not allowed on {path}; allowed: {', '.join(methods)}.",
                                     headers={"Allow": ", ".join(methods)})
    routes = [*supported_paths(), "GET /v1/models", "GET /v1/models/{model}"]
    return NotFoundError(f"Unknown path: {method} {path}. kvgate routes: {', '.join(routes)} (docs/apis.md).")
