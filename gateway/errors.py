"""The one error tree of kvgate and its only mapping to OpenAI error JSON + HTTP status.

Every error a client sees has OpenAI's shape (https://platform.openai.com/docs/guides/error-codes)::

    {"error": {"message": str, "type": str, "param": str | None, "code": str | None}}

Third-party exceptions (aiohttp, pydantic, orjson) are translated into these classes where they
arise; nothing else reaches the HTTP edge except as a generic 500 ``server_error``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from http import HTTPStatus

import orjson


class GatewayError(Exception):
    """Base class: an error that becomes one OpenAI-shaped response.

    Attributes:
        status: HTTP status code.
        type: OpenAI ``error.type``.
        code: OpenAI ``error.code`` (machine-readable), or None.
        param: the request field at fault, or None.
        headers: extra response headers (e.g. ``Retry-After``).
    """

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> bytes:
        """The JSON body, bytes."""
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        )


class InvalidRequestError(GatewayError):
    """400: malformed JSON, wrong types or missing fields."""

    status = 400
    type = "invalid_request_error"


class AuthenticationError(GatewayError):
    """401: missing or unknown API key."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class NotFoundError(GatewayError):
    """404: no such route."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFoundError(NotFoundError):
    """404: the model name is neither a public model, an alias, nor a cluster."""

    code = "model_not_found"


class ModelNotSupportedError(InvalidRequestError):
    """400: the model exists, but what serves it does not serve this API (a chat request to a model
    served only by pooling clusters, embeddings to a model served only by generate clusters)."""

    code = "model_not_supported"


class PermissionDeniedError(GatewayError):
    """403: the key may not use this model (or this operation)."""

    status = 403
    type = "invalid_request_error"
    code = "model_not_allowed"


class ConflictError(GatewayError):
    """409: the resource exists already (admin API)."""

    status = 409
    type = "invalid_request_error"
    code = "conflict"


class RateLimitError(GatewayError):
    """429: a key's quota is exhausted; ``Retry-After`` says when to try again.

    ``code`` is ``rate_limit_exceeded`` (RPM, TPM) or ``insufficient_quota`` (spend budget), as
    OpenAI names them.
    """

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class StateStoreError(GatewayError):
    """503: the shared state store (Redis) could not be reached or failed."""

    status = 503
    type = "server_error"
    code = "state_store_unavailable"


class MethodNotAllowedError(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLargeError(GatewayError):
    """413: the body exceeds ``server.max_body_bytes``."""

    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaTypeError(GatewayError):
    """415: an inference body whose ``Content-Type`` is not ``application/json``."""

    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class UpstreamError(GatewayError):
    """502: the endpoint failed (connection refused or reset, 5xx, broken or error stream)."""

    status = 502
    type = "server_error"
    code = "upstream_error"


class NoHealthyEndpointError(GatewayError):
    """503: the cluster has no endpoint that may be tried now."""

    status = 503
    type = "server_error"
    code = "no_healthy_endpoint"


class UpstreamTimeoutError(GatewayError):
    """504: the endpoint did not answer in time."""

    status = 504
    type = "server_error"
    code = "upstream_timeout"


class UpstreamClientError(GatewayError):
    """An endpoint's own 4xx answer, relayed to the client with its status, in OpenAI's shape.

    The body is rebuilt, never sent as it came: ``message`` from :func:`error_message_of` (the
    endpoint's message, 500 characters at most, or a summary of a body that is not JSON);
    ``param`` the endpoint's when it is a string; ``code`` the endpoint's when it is a short
    string; ``type`` the endpoint's when it is one of OpenAI's snake-case ``*_error`` types, else
    the status's (429: ``rate_limit_error``, any other: ``invalid_request_error``). vLLM answers
    ``{"type": "BadRequestError", "code": 400}`` (its exception's class and an integer), which the
    SDKs would hand to ``error.type`` / ``error.code`` as they came. A message saying the prompt is
    past the model's context length gets OpenAI's ``code: "context_length_exceeded"`` when the
    endpoint gave no string code (vLLM: "This model's maximum context length is ...", "... longer
    than the maximum model length of ...").

    The fields come from the body's ``error`` object, or from the body itself when it is flat
    (older vLLM: ``{"object": "error", "message": ..., "type": ..., "code": 400}``). ``raw``: the
    endpoint's body when it is JSON with an ``error`` object (another API's door reads it:
    ``gateway/protocol/messages.py``), else None.
    """

    type = "invalid_request_error"

    def __init__(self, status: int, raw: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        error, shaped = _error_fields(raw)
        self.raw = raw if shaped else None
        message = error_message_of(raw, status) if raw.strip() else f"upstream returned HTTP {status}"
        param = error.get("param")
        code = error.get("code")
        if not (isinstance(code, str) and 0 < len(code) <= _MAX_CODE_CHARS):
            code = "context_length_exceeded" if _CONTEXT_LENGTH.search(message) else None
        kind = error.get("type")
        self.type = kind if isinstance(kind, str) and _OPENAI_TYPE.fullmatch(kind) else (
            "rate_limit_error" if status == 429 else "invalid_request_error"
        )
        super().__init__(message, param=param if isinstance(param, str) else None, code=code, headers=headers)
        self.code = code  # None stays None (the class default is not an endpoint's code)


_MAX_CODE_CHARS = 64
_OPENAI_TYPE = re.compile(r"[a-z]+(?:_[a-z]+)*_error")
_CONTEXT_LENGTH = re.compile(r"maximum context length|maximum model length|context length exceeded", re.IGNORECASE)


def _error_fields(raw: bytes) -> tuple[dict, bool]:
    """(the error's fields, whether the body has an ``error`` object) of an endpoint's JSON error body."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}, False
    if not isinstance(parsed, dict):
        return {}, False
    error = parsed.get("error")
    if isinstance(error, dict):
        return error, True
    return (parsed, False) if isinstance(parsed.get("message"), str) else ({}, False)


def error_message_of(raw: bytes, status: int | None = None, *, relay_text: bool = True) -> str:
    """A human message from an endpoint's error body, never its raw page.

    An OpenAI-shaped (``{"error": {"message"}}``) or flat (``{"message"}``) JSON body gives its
    message (500 characters at most), as do the other servers' shapes: a string ``error`` (TGI,
    SGLang: ``{"error": "...", "error_type": ...}``) and FastAPI's ``detail``, a string or
    pydantic's list of ``{"loc", "msg"}`` (``temperature: Input should be ...``). Any other body is summarised as the status and a short
    reason (``Bad Gateway (a non-JSON body of 1234 bytes, not relayed)``): an HTML error page or
    a ``Traceback`` never reaches a client. With ``relay_text`` (the endpoint's own 4xx), one
    short line of plain text (at most 200 characters, no markup) is still relayed as it came.
    """
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:500]
        if isinstance(parsed.get("message"), str):
            return parsed["message"][:500]
        if isinstance(error, str) and error.strip():
            return error[:500]
        detail = _detail(parsed.get("detail"))
        if detail:
            return detail[:500]
    if relay_text and parsed is None:
        text = raw.decode("utf-8", "replace").strip()
        if text and len(text) <= 200 and "\n" not in text and not text.startswith("<") and "Traceback" not in text:
            return text
    return _summary(raw, status, json=parsed is not None)


def _detail(detail: object) -> str | None:
    """FastAPI's ``detail``: a string, or pydantic's errors as ``field: msg; ...`` (None otherwise)."""
    if isinstance(detail, str):
        return detail.strip() or None
    if not isinstance(detail, list):
        return None
    parts = []
    for item in detail[:10]:
        if isinstance(item, dict) and isinstance(item.get("msg"), str):
            where = ".".join(str(part) for part in item.get("loc") or () if part != "body") if isinstance(
                item.get("loc"), list) else ""
            parts.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "; ".join(parts) or None


def _summary(raw: bytes, status: int | None, *, json: bool = False) -> str:
    try:
        reason = HTTPStatus(status).phrase if status is not None else "Error"
    except ValueError:
        reason = "Error"
    what = "a JSON body with no message" if json else "a non-JSON body"
    return f"{reason} ({what} of {len(raw)} bytes, not relayed)"
