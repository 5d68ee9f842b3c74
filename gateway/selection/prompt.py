"""The prompt as route selection reads it: the instruction text and a cheap token estimate.

**Instruction text** (what the classifier and the cue features read): for chat, the last user
message alone; for text completions, the prompt string (the last one of a list). Content lists
contribute their text parts. The system prompt and earlier turns are context, not the request:
scoring them with it sends a product's long system prompt, or an earlier hard question, to
reasoning. They leave only **context marks** (:attr:`PromptView.context`): ``system`` (a system
or developer message), ``history`` (an earlier user turn), ``doc`` (an earlier user turn of at
least :data:`DOC_CHARS` characters: a pasted document the last turn works on) and
``tool_result`` (a tool or function message: an agent loop).

**Token estimate** (context fit, cost estimates):

    tokens = ceil((characters - digits) / chars_per_token) + digits + MESSAGE_OVERHEAD * messages

over every message's text (all turns), tool schemas and tool calls as JSON; token-id prompts
count exactly. Digits count one token each: Llama-, Qwen- and SmolLM-family tokenizers split
numbers into single digits, so tables of figures are several times denser than prose.
``chars_per_token`` defaults to 4, OpenAI's rule of thumb for English with BPE vocabularies; a
cluster whose model tokenizes denser sets its own (``[clusters.NAME.selection]
chars_per_token``), and the context check adds a safety margin (``[route_selection]
context_margin``, 15% by default, see ``selection/policy.py``). ``bench/route_select.py``
measures the estimate against a real BPE tokenizer on the labeled set: with SmolLM2's English
vocabulary, English prompts come out at the estimate's median (3.7-4 characters per token) and
Indonesian ones at about 2.5 characters per token (set ``chars_per_token = 2.5`` on such a
cluster; multilingual vocabularies sit in between). A real tokenizer costs about 1 ms per 32 KB
(``gateway/prefix/hashing.py``) and needs the model's vocabulary; this costs a ``bytes.translate``
of the text's UTF-8 bytes (about 30 us per 32 KB, ASCII or not) and a division. ``MESSAGE_OVERHEAD`` (4) covers the chat template's role
markers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.protocol.openai import InferenceRequest, Operation

DOC_CHARS = 400
DIGIT_SCAN_CHARS = 131_072
MESSAGE_OVERHEAD = 4


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class PromptView:
    """What route selection reads of a prompt.

    Attributes:
        text: the instruction text (see the module docstring).
        chars: characters of every message, tool schema and tool call together.
        messages: number of messages (1 for a completion prompt).
        token_ids: token count when the prompt was sent as token ids, else 0.
        digits: how many of ``chars`` are the digits 0-9.
        context: the context marks (see the module docstring), in that order.
    """

    text: str
    chars: int
    messages: int
    token_ids: int = 0
    digits: int = 0
    context: tuple[str, ...] = ()

    def estimate_tokens(self, chars_per_token: float = 4.0) -> int:
        """Estimated prompt tokens (see the module docstring)."""
        if self.token_ids:
            return self.token_ids
        return math.ceil((self.chars - self.digits) / chars_per_token) + self.digits + MESSAGE_OVERHEAD * self.messages


def digit_count(text: str) -> int:
    """How many characters of ``text`` are the digits 0-9; over :data:`DIGIT_SCAN_CHARS`
    characters, the share of digits in its first and last half of that, times its length (a
    text that long is far past any context either way, and counting it all would hold the
    event loop for milliseconds)."""
    if len(text) <= DIGIT_SCAN_CHARS:
        return _digits(text)
    half = DIGIT_SCAN_CHARS // 2
    sample = text[:half] + text[-half:]
    return round(_digits(sample) * len(text) / len(sample))


def _digits(text: str) -> int:
    """The digits 0-9 in ``text``, counted as bytes of its UTF-8 form (no multi-byte sequence
    holds a byte 0x30-0x39, so the count is the same): ``bytes.translate`` is a table loop, while
    ``str.translate`` of a non-ASCII text looks every character up in a dict (128 K characters:
    0.5 ms against 100 ms; ASCII: 0.11 against 0.23 ms)."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data) - len(data.translate(None, b"0123456789"))


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode() if value else ""


def _chat_view(body: dict[str, Any]) -> PromptView:
    messages = body.get("messages") or []
    system = doc = tool_result = False
    users = 0
    last_user = ""
    extra = _json_text(body.get("tools")) + _json_text(body.get("functions"))
    chars, digits = len(extra), digit_count(extra)
    for message in messages:
        if not isinstance(message, dict):
            continue
        text = content_text(message.get("content")) + _json_text(message.get("tool_calls"))
        chars += len(text)
        digits += digit_count(text)
        role = message.get("role")
        if role in ("system", "developer"):
            system = True
        elif role == "user":
            doc = doc or len(last_user) >= DOC_CHARS
            users += 1
            last_user = text
        elif role in ("tool", "function"):
            tool_result = True
    marks = (("system", system), ("history", users > 1), ("doc", doc), ("tool_result", tool_result))
    context = tuple(name for name, present in marks if present)
    return PromptView(last_user, chars, len(messages), digits=digits, context=context)


def _completion_view(body: dict[str, Any]) -> PromptView:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return PromptView(prompt, len(prompt), 1, digits=digit_count(prompt))
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        longest = max(prompt, key=len)
        return PromptView(prompt[-1], len(longest), 1, digits=digit_count(longest))
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) for p in prompt):
            return PromptView("", 0, 1, token_ids=len(prompt))
        return PromptView("", 0, 1, token_ids=max((len(p) for p in prompt if isinstance(p, list)), default=0))
    return PromptView("", 0, 1)


def view(request: InferenceRequest) -> PromptView:
    """The :class:`PromptView` of a validated request (never raises)."""
    if request.operation is Operation.CHAT:
        return _chat_view(request.body)
    return _completion_view(request.body)
