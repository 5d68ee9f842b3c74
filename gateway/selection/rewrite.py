"""Switching thinking off in a request body, per the target cluster's ``thinking_switch``.

Used only when route selection downgrades a request that wanted reasoning onto a fast cluster
whose model can think but need not (``selection/policy.py``, ``thinking_off``). The switches:

==================== ============================================================================
``none``             the body is sent as it came (the model has no switch)
``enable-thinking``  ``chat_template_kwargs.enable_thinking = false`` (Qwen3 hybrid models on vLLM
                     and SGLang; other template arguments are kept)
``effort-none``      ``reasoning_effort = "none"`` (models that accept OpenAI's ``none``)
``effort-low``       ``reasoning_effort = "low"`` (models whose lowest effort is ``low``)
==================== ============================================================================

The rewritten body is serialized once (orjson) and becomes the request's new original bytes;
everything else in it is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import orjson

from gateway.protocol.openai import InferenceRequest


def _enable_thinking_off(body: dict[str, Any]) -> dict[str, Any]:
    kwargs = body.get("chat_template_kwargs")
    merged = {**kwargs, "enable_thinking": False} if isinstance(kwargs, dict) else {"enable_thinking": False}
    return {**body, "chat_template_kwargs": merged}


SWITCHES: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = MappingProxyType({
    "none": None,
    "enable-thinking": _enable_thinking_off,
    "effort-none": lambda body: {**body, "reasoning_effort": "none"},
    "effort-low": lambda body: {**body, "reasoning_effort": "low"},
})
"""Switch name -> body rewrite (None: no switch)."""


def thinking_off(request: InferenceRequest, switch: str) -> InferenceRequest:
    """``request`` with thinking switched off by ``switch`` (unchanged for ``none``)."""
    rewrite = SWITCHES.get(switch)
    if rewrite is None:
        return request
    body = rewrite(request.body)
    return replace(request, body=body, raw=orjson.dumps(body))
