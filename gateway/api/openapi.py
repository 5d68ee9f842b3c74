"""The gateway's OpenAPI document: FastAPI's (health, metrics, admin) plus the ``/v1`` routes.

The inference routes are plain Starlette routes (no FastAPI validation layer on the hot path), so
FastAPI does not see them; their contract is written here by hand: the request fields kvgate
reads (``gateway/protocol/openai.py``; every other field passes through untouched, hence
``additionalProperties``), the 200 answers (JSON or an SSE stream) and every error status the
gateway itself produces, each with OpenAI's error body. FastAPI's 422 validation answers are
documented as the 400 ``invalid_request_error`` the app actually sends (``gateway/app.py``).
Both bearer schemes (client key, admin key) are declared.

Reference: https://platform.openai.com/docs/api-reference/chat/create
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

_ERROR_REF = {"$ref": "#/components/schemas/OpenAIError"}
_ERRORS = {
    "400": "Malformed JSON or a field of the wrong type",
    "401": "Missing or unknown API key",
    "403": "The key may not use this model",
    "404": "Unknown model",
    "413": "Body larger than server.max_body_bytes",
    "415": "Content-Type is not application/json",
    "429": "A key's quota is exhausted (Retry-After)",
    "502": "Every endpoint failed",
    "503": "No endpoint can take requests (Retry-After)",
    "504": "The endpoint timed out",
}

_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {"role": {"type": "string", "minLength": 1}, "content": {"type": ["string", "null"]}},
}
_COMMON = {
    "model": {"type": "string", "minLength": 1, "examples": ["qwen-fast"]},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"]},
    "user": {"type": ["string", "null"]},
    "prompt_cache_key": {"type": ["string", "null"]},
}
_PROMPT = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1, "items": {"type": "string"}},
        {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        {"type": "array", "minItems": 1, "items": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
    ]
}


def _error_responses(codes: list[str]) -> dict[str, Any]:
    return {
        code: {"description": _ERRORS[code], "content": {"application/json": {"schema": _ERROR_REF}}}
        for code in codes
    }


def _inference(summary: str, required: list[str], extra: dict[str, Any], object_name: str) -> dict[str, Any]:
    body = {"type": "object", "required": required, "properties": {**_COMMON, **extra}, "additionalProperties": True}
    answer = {"type": "object", "required": ["object"], "properties": {"object": {"type": "string", "examples": [object_name]}}}
    return {
        "post": {
            "tags": ["openai"],
            "summary": summary,
            "security": [{"ClientKey": []}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {
                "200": {
                    "description": "The endpoint's answer, relayed (SSE when stream is true)",
                    "content": {"application/json": {"schema": answer}, "text/event-stream": {"schema": {"type": "string"}}},
                },
                **_error_responses(["400", "401", "403", "404", "413", "429", "502", "503", "504"]),
            },
        }
    }


def v1_paths() -> dict[str, Any]:
    """The hand-written OpenAPI paths of the ``/v1`` routes."""
    models = {
        "type": "object",
        "required": ["object", "data"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {"type": "object"}}},
    }
    return {
        "/v1/chat/completions": _inference(
            "Create a chat completion",
            ["model", "messages"],
            {"messages": {"type": "array", "minItems": 1, "items": _MESSAGE}},
            "chat.completion",
        ),
        "/v1/completions": _inference("Create a text completion", ["model", "prompt"], {"prompt": _PROMPT}, "text_completion"),
        "/v1/models": {
            "get": {
                "tags": ["openai"],
                "summary": "List public models and aliases",
                "security": [{"ClientKey": []}],
                "responses": {
                    "200": {"description": "Models", "content": {"application/json": {"schema": models}}},
                    **_error_responses(["401"]),
                },
            }
        },
    }


def _validation_as_400(schema: dict[str, Any]) -> None:
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None:
                responses.setdefault("400", _error_responses(["400"])["400"])
            if path.startswith("/admin"):
                operation.setdefault("security", [{"AdminKey": []}])
                for code in ("401", "404"):
                    description = responses.get(code, {}).get("description", "")
                    responses[code] = {**_error_responses([code])[code], "description": description}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema with the ``/v1`` paths, error schema and security schemes added."""
    schema = get_openapi(
        title=app.title, version=app.version, routes=app.routes, description="kvgate: an OpenAI-compatible LLM gateway"
    )
    schema = copy.deepcopy(schema)
    schema["paths"] = {**v1_paths(), **schema.get("paths", {})}
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {})["OpenAIError"] = ERROR_SCHEMA
    components["securitySchemes"] = {
        "ClientKey": {"type": "http", "scheme": "bearer", "description": "A client API key"},
        "AdminKey": {"type": "http", "scheme": "bearer", "description": "The admin key (admin.api_key)"},
    }
    _validation_as_400(schema)
    for name in ("HTTPValidationError", "ValidationError"):
        components["schemas"].pop(name, None)
    return schema


def install_openapi(app: FastAPI) -> None:
    """Serve :func:`build_openapi` at ``/openapi.json`` (built once, on first request)."""
    cache: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if "schema" not in cache:
            cache["schema"] = build_openapi(app)
        return cache["schema"]

    app.openapi = openapi  # type: ignore[method-assign]
