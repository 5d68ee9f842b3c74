"""Request signals: explicit switches, output caps, JSON output, the prompt view and its estimate."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.protocol.openai import Operation, parse_request
from gateway.selection.classifier import ClassifierModel
from gateway.selection.prompt import MESSAGE_OVERHEAD, content_text, view
from gateway.selection.signals import explicit_need, output_cap, read_signals, wants_json


def chat(**body: Any) -> Any:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return parse_request(Operation.CHAT, orjson.dumps({"model": "auto", **body}))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, (None, None)),
        ({"reasoning_effort": "high"}, ("reasoning", "reasoning_effort=high")),
        ({"reasoning_effort": "LOW"}, ("reasoning", "reasoning_effort=low")),
        ({"reasoning_effort": "minimal"}, ("light", "reasoning_effort=minimal")),
        ({"reasoning_effort": "none"}, ("light", "reasoning_effort=none")),
        ({"reasoning_effort": "turbo"}, (None, None)),
        ({"reasoning_effort": 3}, (None, None)),
        ({"reasoning": {"effort": "medium"}}, ("reasoning", "reasoning.effort=medium")),
        ({"reasoning": {"enabled": False}}, ("light", "reasoning.enabled=false")),
        ({"chat_template_kwargs": {"enable_thinking": False}}, ("light", "chat_template_kwargs.enable_thinking=false")),
        ({"chat_template_kwargs": {"thinking": True}}, ("reasoning", "chat_template_kwargs.thinking=true")),
        ({"chat_template_kwargs": {"enable_thinking": "yes"}}, (None, None)),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, ("reasoning", "thinking.type=enabled")),
        ({"thinking": {"type": "disabled"}}, ("light", "thinking.type=disabled")),
        ({"reasoning_effort": "none", "thinking": {"type": "enabled"}}, ("light", "reasoning_effort=none")),
    ],
)
def test_explicit_need(body: dict[str, Any], expected: tuple[str | None, str | None]) -> None:
    assert explicit_need(body) == expected


@pytest.mark.parametrize(
    ("body", "cap"),
    [
        ({}, None),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 50, "max_tokens": 100}, 50),
        ({"max_completion_tokens": 0, "max_tokens": 100}, 100),
        ({"max_tokens": True}, None),
        ({"max_tokens": "100"}, None),
    ],
)
def test_output_cap(body: dict[str, Any], cap: int | None) -> None:
    assert output_cap(body) == cap


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [(None, False), ({"type": "text"}, False), ({"type": "json_object"}, True),
     ({"type": "json_schema", "json_schema": {"strict": True}}, True), ("json", False)],
)
def test_wants_json(fmt: Any, expected: bool) -> None:
    assert wants_json({"response_format": fmt}) is expected


def test_prompt_view_reads_the_last_user_message_alone_and_counts_everything() -> None:
    request = chat(messages=[
        {"role": "system", "content": "S" * 600},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    ])
    prompt = view(request)
    assert prompt.text == "second" and prompt.context == ("system", "history")
    assert prompt.chars == 600 + len("first question") + len("an answer") + len("second")
    assert prompt.messages == 4
    assert prompt.estimate_tokens(4.0) == -(-prompt.chars // 4) + 4 * MESSAGE_OVERHEAD


@pytest.mark.parametrize(
    ("prompt", "text", "tokens"),
    [
        ("abcdefgh", "abcdefgh", 2 + MESSAGE_OVERHEAD),
        (["one", "a longer prompt"], "a longer prompt", 4 + MESSAGE_OVERHEAD),
        ([1, 2, 3, 4, 5], "", 5),
        ([[1, 2], [1, 2, 3]], "", 3),
    ],
)
def test_completion_prompt_view(prompt: Any, text: str, tokens: int) -> None:
    request = parse_request(Operation.COMPLETION, orjson.dumps({"model": "auto", "prompt": prompt}))
    assert view(request).text == text
    assert view(request).estimate_tokens() == tokens


def test_tool_schemas_count_towards_the_estimate() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    assert view(chat(tools=tools)).chars == len(orjson.dumps(tools)) + 2


def test_content_text_ignores_non_text_parts() -> None:
    assert content_text(None) == ""
    assert content_text([{"type": "text", "text": "a"}, {"type": "input_audio"}, "x", {"text": "b"}]) == "a\nb"


def test_read_signals_applies_the_tool_and_json_biases() -> None:
    model = ClassifierModel(bias=0.0, weights={}, threshold=0.5)
    plain = read_signals(chat(), model, tool_bias=1.0, strict_json_bias=-1.0)
    tools = read_signals(chat(tools=[{"type": "function", "function": {"name": "f"}}]), model, tool_bias=1.0)
    json_out = read_signals(chat(response_format={"type": "json_object"}), model, strict_json_bias=-1.0)
    assert plain.score == pytest.approx(0.5)
    assert tools.tools and tools.score == pytest.approx(0.7310586)
    assert json_out.strict_json and json_out.score == pytest.approx(0.2689414)


def test_read_signals_without_a_model_skips_the_features() -> None:
    signals = read_signals(chat(messages=[{"role": "user", "content": "Prove it step by step"}], max_tokens=9), None)
    assert (signals.score, signals.cues, signals.max_output_tokens) == (0.0, frozenset(), 9)


def test_read_signals_reports_cues() -> None:
    model = ClassifierModel(bias=0.0, weights={"cue:proof": 2.0}, threshold=0.5)
    signals = read_signals(chat(messages=[{"role": "user", "content": "Buktikan bahwa akar 2 irasional"}]), model)
    assert "proof" in signals.cues and signals.score == pytest.approx(0.8807971)


@pytest.mark.parametrize(
    ("content", "tokens"),
    [
        ("abcdefgh", 2 + MESSAGE_OVERHEAD),
        ("abcd 2024", 2 + 4 + MESSAGE_OVERHEAD),  # 5 other characters -> 2 tokens, 4 digits -> 4
        ("1234567890", 10 + MESSAGE_OVERHEAD),
        ("", MESSAGE_OVERHEAD),
    ],
)
def test_digits_count_one_token_each(content: str, tokens: int) -> None:
    assert view(chat(messages=[{"role": "user", "content": content}])).estimate_tokens(4.0) == tokens


def test_a_cluster_may_estimate_at_its_own_density() -> None:
    signals = read_signals(chat(messages=[{"role": "user", "content": "x" * 400}]), None)
    assert signals.prompt_tokens == 100 + MESSAGE_OVERHEAD
    assert signals.prompt_tokens_at(2.0) == 200 + MESSAGE_OVERHEAD
    assert signals.prompt_tokens_at(None) == signals.prompt_tokens


def test_a_huge_text_counts_its_digits_from_its_head_and_tail() -> None:
    from gateway.selection.prompt import DIGIT_SCAN_CHARS, digit_count

    assert digit_count("ab12" * (DIGIT_SCAN_CHARS // 4)) == DIGIT_SCAN_CHARS // 2
    assert digit_count("ab12" * DIGIT_SCAN_CHARS) == 2 * DIGIT_SCAN_CHARS


def test_the_prompt_field_is_named_for_the_context_length_400() -> None:
    chat = parse_request(Operation.CHAT, orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
    text = parse_request(Operation.COMPLETION, orjson.dumps({"model": "m", "prompt": "x"}))
    assert (read_signals(chat, None).prompt_param, read_signals(text, None).prompt_param) == ("messages", "prompt")
