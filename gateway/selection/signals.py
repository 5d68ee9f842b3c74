"""What a request says about its own needs: explicit switches, output budget, prompt features.

Read from the body, never changed (pure; unknown shapes are ignored, never an error):

* **Explicit reasoning switches**, first match wins:
  ``reasoning_effort`` (OpenAI chat: ``none``/``minimal`` -> light, ``low``/``medium``/``high``/
  ``xhigh`` -> reasoning), ``reasoning.effort`` (Responses API, OpenRouter; same values) or
  ``reasoning.enabled``, ``chat_template_kwargs.enable_thinking`` or ``.thinking`` (Qwen3 and
  DeepSeek chat templates on vLLM/SGLang), ``thinking.type`` (``enabled``/``disabled``).
* **Output budget**: ``max_completion_tokens``, else ``max_tokens``.
* **Request features** (``selection/features.py``) of the last user turn and the context marks
  (``selection/prompt.py``), tools, JSON output and the output cap; the estimated prompt tokens,
  whether ``tools`` (or legacy ``functions``) are offered and whether the output must be JSON
  (``response_format`` of type ``json_schema`` or ``json_object``).
* **Classifier score**: the probability that the request needs reasoning, from the classifier's
  logit (which has learned what tools and JSON output say) plus the operator's ``tool_bias``
  when tools are offered and ``strict_json_bias`` when JSON output is required
  (``[route_selection]``, 0 by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.protocol.openai import InferenceRequest, Operation
from gateway.selection.classifier import ClassifierModel, sigmoid
from gateway.selection.features import cue_groups, request_features
from gateway.selection.prompt import PromptView, view

REASONING = "reasoning"
LIGHT = "light"

_EFFORT = {"none": LIGHT, "minimal": LIGHT, "low": REASONING, "medium": REASONING, "high": REASONING, "xhigh": REASONING}
_THINKING_TYPE = {"enabled": REASONING, "disabled": LIGHT}


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class RequestSignals:
    """Everything the policy reads about one request.

    Attributes:
        explicit: ``reasoning`` or ``light`` when the request says so itself, else None.
        explicit_source: the field that said it (``reasoning_effort=high``), else None.
        max_output_tokens: the request's output cap, or None.
        prompt_tokens: the estimated prompt tokens (no margin).
        tools: tools or functions are offered.
        strict_json: the output must be JSON.
        cues: the cue groups found in the instruction text.
        score: probability that the prompt needs reasoning (classifier plus biases).
        prompt: the prompt's view, to estimate its tokens at a cluster's own characters per token.
        features: the request features the classifier read (empty without a classifier).
        prompt_param: the request field holding the prompt (``messages``, or a text
            completion's ``prompt``): the ``param`` of a context-length 400.
    """

    explicit: str | None
    explicit_source: str | None
    max_output_tokens: int | None
    prompt_tokens: int
    tools: bool
    strict_json: bool
    cues: frozenset[str]
    score: float
    prompt: PromptView | None = None
    features: frozenset[str] | set[str] = frozenset()
    prompt_param: str = "messages"

    def prompt_tokens_at(self, chars_per_token: float | None) -> int:
        """The prompt estimate at ``chars_per_token`` (None: ``prompt_tokens``)."""
        if chars_per_token is None or self.prompt is None:
            return self.prompt_tokens
        return self.prompt.estimate_tokens(chars_per_token)


def explicit_need(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(reasoning | light | None, source)`` from the request's own reasoning switches."""
    effort = body.get("reasoning_effort")
    if isinstance(effort, str) and effort.lower() in _EFFORT:
        return _EFFORT[effort.lower()], f"reasoning_effort={effort.lower()}"
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping):
        effort = reasoning.get("effort")
        if isinstance(effort, str) and effort.lower() in _EFFORT:
            return _EFFORT[effort.lower()], f"reasoning.effort={effort.lower()}"
        if isinstance(reasoning.get("enabled"), bool):
            return (REASONING if reasoning["enabled"] else LIGHT), f"reasoning.enabled={str(reasoning['enabled']).lower()}"
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping):
        for name in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(name), bool):
                return (REASONING if kwargs[name] else LIGHT), f"chat_template_kwargs.{name}={str(kwargs[name]).lower()}"
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and isinstance(thinking.get("type"), str) and thinking["type"] in _THINKING_TYPE:
        return _THINKING_TYPE[thinking["type"]], f"thinking.type={thinking['type']}"
    return None, None


def output_cap(body: Mapping[str, Any]) -> int | None:
    """``max_completion_tokens``, else ``max_tokens``; None when absent or not a positive integer."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def wants_json(body: Mapping[str, Any]) -> bool:
    """The request constrains output to JSON (``response_format`` json_schema or json_object)."""
    fmt = body.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object")


def read_signals(
    request: InferenceRequest,
    model: ClassifierModel | None,
    *,
    chars_per_token: float = 4.0,
    tool_bias: float = 0.0,
    strict_json_bias: float = 0.0,
    prompt: PromptView | None = None,
) -> RequestSignals:
    """The signals of ``request`` (see the module docstring); without a ``model`` (only the
    estimates are needed), no features are read and ``score`` is 0."""
    body = request.body
    prompt = prompt or view(request)
    explicit, source = explicit_need(body)
    tools = bool(body.get("tools") or body.get("functions"))
    strict_json = wants_json(body)
    features: set[str] = set()
    score = 0.0
    cap = output_cap(body)
    if model is not None:
        features = request_features(prompt.text, prompt.context, body, cap)
        score = sigmoid(model.logit_of(features) + (tool_bias if tools else 0.0) + (strict_json_bias if strict_json else 0.0))
    return RequestSignals(
        explicit=explicit,
        explicit_source=source,
        max_output_tokens=cap,
        prompt_tokens=prompt.estimate_tokens(chars_per_token),
        tools=tools,
        strict_json=strict_json,
        cues=cue_groups(features),
        score=score,
        prompt=prompt,
        features=features,
        prompt_param="prompt" if request.operation is Operation.COMPLETION else "messages",
    )
