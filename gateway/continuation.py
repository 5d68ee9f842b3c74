"""Mid-stream continuation: finish a broken plain-text stream on another endpoint, invisibly.

When an endpoint fails after content reached the client, kvgate may ask another endpoint of
the same cluster (same model) to go on from where the answer stopped:

* chat: the original messages plus the partial answer as a final assistant message, with vLLM's
  ``continue_final_message: true`` and ``add_generation_prompt: false`` (vLLM chat-template
  options, https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html), so the model
  extends that message instead of starting a new turn;
* text completion: the original string prompt plus the partial text;
* ``max_tokens`` / ``max_completion_tokens`` reduced by the tokens already sent (one per output
  event, as vLLM streams them).

The client sees one stream: the continuation's chunks get the original ``id``, ``created`` and
``model``; its opening role-only chunk is dropped; each following chunk carries an extension
field ``kvgate_continuation = {"hop": n, "endpoint": name}`` (official SDKs ignore unknown fields);
the final usage counts the whole answer (``completion_tokens`` plus the tokens sent before,
``prompt_tokens`` minus them, since the continuation's prompt held them). Never continued: tool
calls, JSON/structured outputs, ``n`` > 1, requests already using ``continue_final_message``,
non-string prompts, streams that carried reasoning (its text cannot be re-fed), and answers
longer than ``MAX_COLLECTED_CHARS`` (256 Ki characters, ``gateway/protocol/sse.py``: the text a
stream keeps for this is bounded).

**Restart.** A stream that broke before any generated text, finish reason or usage reached the
client (only comments or the role chunk did) is not continued but *restarted*: the next endpoint
gets the original request (only the model name and the usage ask adapted), and its chunks are
rewritten to the original identity the same way.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocol.openai import InferenceRequest, Operation, usage_stream_options
from gateway.protocol.sse import StreamObserver

EXTENSION_FIELD = "kvgate_continuation"


def continuable(request: InferenceRequest) -> bool:
    """Whether this request's stream could be continued elsewhere if it broke mid-way."""
    body = request.body
    if not request.stream or body.get("n") not in (None, 1) or body.get("continue_final_message"):
        return False
    if body.get("tools") or body.get("functions") or body.get("tool_choice") not in (None, "none"):
        return False
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        return False
    if any(body.get(key) for key in ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")):
        return False
    if request.operation is Operation.COMPLETION:
        return isinstance(body.get("prompt"), str) and not body.get("echo")
    return True


def resumable(request: InferenceRequest, observer: StreamObserver) -> bool:
    """Whether :func:`continuation_body` has a request for the answer ``observer`` saw (pure, cheap:
    the same conditions, without building the body)."""
    if observer.other_output:
        return False
    if observer.finish_reasons:
        return False  # the answer ended: continuing it would repeat its end (the relay ends it)
    if not observer.text:
        return not (observer.output_events or observer.usage is not None)
    for key in ("max_tokens", "max_completion_tokens"):
        limit = request.body.get(key)
        if isinstance(limit, int) and limit - observer.output_events <= 0:
            return False
    return True


def continuation_body(
    request: InferenceRequest, observer: StreamObserver, served_model: str, *, ask_usage: bool = False
) -> bytes | None:
    """The request that continues the answer ``observer`` has seen so far, or None if impossible.

    None when the stream carried reasoning, tool calls or several choices, when a finish reason or
    usage but no text was sent, or when no output budget is left. When nothing was generated yet
    the answer is the original request (a restart, not a continuation). ``ask_usage``: ask for the
    usage chunk (``usage_stream_options``) as the first attempt did for a client that did not.
    """
    if not resumable(request, observer):
        return None
    if not observer.text:
        return request.body_for(served_model, ask_usage=ask_usage)  # nothing generated: start afresh
    partial = "".join(observer.text)
    body: dict[str, Any] = {**request.body, "model": served_model}
    if ask_usage:
        body["stream_options"] = usage_stream_options(request.body)
    for key in ("max_tokens", "max_completion_tokens"):
        limit = body.get(key)
        if isinstance(limit, int):
            body[key] = limit - observer.output_events
    if request.operation is Operation.CHAT:
        body["messages"] = [*body["messages"], {"role": "assistant", "content": partial}]
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    else:
        body["prompt"] = body["prompt"] + partial
    return orjson.dumps(body)


class ContinuationRewriter:
    """Makes a continuation's events look like the original stream's (see module docstring)."""

    def __init__(self, identity: dict[str, Any] | None, tokens_before: int, hop: int, endpoint: str) -> None:
        self._identity = {key: value for key, value in (identity or {}).items() if value is not None}
        self._tokens_before = tokens_before
        self._extension = {"hop": hop, "endpoint": endpoint}
        self._started = identity is None  # the client saw no chunk yet: keep this stream's role chunk

    def rewrite(self, event: dict[str, Any]) -> bytes | None:
        """The SSE bytes to relay for ``event``, or None to drop it."""
        choices = event.get("choices")
        if not self._started and isinstance(choices, list) and choices and not _carries_output(choices):
            return None  # the continuation's role-only opening chunk
        self._started = True
        event.update(self._identity)
        usage = event.get("usage")
        if isinstance(usage, dict):
            event["usage"] = _merged_usage(usage, self._tokens_before)
        event[EXTENSION_FIELD] = self._extension
        return b"data: " + orjson.dumps(event) + b"\n\n"


def _carries_output(choices: list[Any]) -> bool:
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if choice.get("text") or choice.get("finish_reason"):
            return True
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
            return True
    return False


def _merged_usage(usage: dict[str, Any], tokens_before: int) -> dict[str, Any]:
    merged = dict(usage)
    if isinstance(merged.get("completion_tokens"), int):
        merged["completion_tokens"] += tokens_before
    if isinstance(merged.get("prompt_tokens"), int):
        merged["prompt_tokens"] = max(0, merged["prompt_tokens"] - tokens_before)
    return merged
