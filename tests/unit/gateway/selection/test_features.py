"""Request features: the ask apart from what it supplies, the request verb, context and body signals."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.protocol.openai import Operation, parse_request
from gateway.selection.classifier import ClassifierModel
from gateway.selection.features import SCAN_CHARS, STOPWORDS, ask_features, featurize, request_features, split_ask
from gateway.selection.prompt import view
from gateway.selection.signals import read_signals

DOC = ("The early shift will begin at 6:30 instead of 7:00 from the 3rd of next month. Why the change? "
       "Our logistics partner now arrives before the morning traffic, and late shifts end thirty minutes "
       "earlier so total hours stay the same. Prove you read this by signing the sheet at reception.")
CODE = "```python\ndef average(values):\n    return sum(values) / len(values)\n```"
TRACE = ('Traceback (most recent call last):\n  File "app.py", line 5, in average\n'
         "    return total / len(values)\nZeroDivisionError: division by zero")
TABLE = "region,Q1,Q2,Q3\nNorth,120,130,150\nSouth,80,95,70\nEast,60,61,64"


def chat(**body: Any) -> Any:
    return parse_request(Operation.CHAT, orjson.dumps({"model": "auto", **body}))


@pytest.mark.parametrize(
    ("text", "ask", "kinds"),
    [
        (f"Summarize this in two lines.\n\n{DOC}", "Summarize this in two lines.", {"prose"}),
        (f"{DOC}\n\nTranslate into Indonesian please.", "Translate into Indonesian please.", {"prose"}),
        (f'Extract the dates:\n"""\n{DOC}\n"""', "Extract the dates:", {"prose"}),
        (f"Summarize: {DOC}", "Summarize:", {"prose"}),
        (f"Why does this fail?\n\n{CODE}\n\n{TRACE}", "Why does this fail?", {"code", "trace"}),
        (f"Convert to JSON\n\n{TABLE}", "Convert to JSON", {"table"}),
        ("Is 391 prime?", "Is 391 prime?", set()),
    ],
)
def test_split_ask_separates_the_ask_from_what_it_supplies(text: str, ask: str, kinds: set[str]) -> None:
    assert split_ask(text) == (ask, kinds)


def test_the_ask_features_do_not_depend_on_the_pasted_document() -> None:
    ask = "Please summarise this for my manager."
    features = request_features(f"{ask}\n\n{DOC}\n\n{DOC.upper()}")
    assert ask_features(ask) <= features
    assert not {"prove", "why", "cue:proof", "cue:why", "shift"} & features
    assert {"doc:prose", "verb:transform+doc"} <= features


def test_no_shape_features_numbers_or_lone_function_words() -> None:
    features = featurize("What is 15% of 80 and is that more than 12? Dan yang itu?")
    assert not any(f.startswith("shape:") or any(ch.isdigit() for ch in f) for f in features)
    assert not features & STOPWORDS
    assert "%" in features and "doc:none" in features


@pytest.mark.parametrize(
    ("text", "verb"),
    [
        ("Write a short letter to my landlord to prove that I paid the deposit.", "verb:create"),
        ("Prove that the square root of 2 is irrational, then write it up.", "verb:proof"),
        ("Tentukan sentimen ulasan berikut.", "verb:quant"),
        ("Tolong terjemahkan kalimat ini, kenapa susah ya?", "verb:transform"),
    ],
)
def test_the_request_verb_is_the_first_cue(text: str, verb: str) -> None:
    assert [f for f in featurize(text) if f.startswith("verb:") and "+" not in f] == [verb]


def test_context_marks_and_body_signals() -> None:
    request = chat(
        messages=[
            {"role": "system", "content": "You are a math tutor. Prove everything rigorously."},
            {"role": "user", "content": DOC * 2},
            {"role": "assistant", "content": "Got it."},
            {"role": "tool", "content": "{}", "tool_call_id": "t1"},
            {"role": "user", "content": "Thanks, make it shorter."},
        ],
        tools=[{"type": "function", "function": {"name": "f"}}],
        response_format={"type": "json_object"},
        max_completion_tokens=300,
    )
    prompt = view(request)
    assert prompt.text == "Thanks, make it shorter." and prompt.context == ("system", "history", "doc", "tool_result")
    features = read_signals(request, ClassifierModel(bias=0.0, weights={}, threshold=0.5)).features
    assert {"ctx:system", "ctx:history", "ctx:doc", "ctx:tool_result", "req:tools", "req:json", "req:max_out<=512"} <= features
    assert not {"prove", "rigorously", "cue:proof", "tutor"} & features


def test_a_huge_turn_is_scanned_in_bounded_parts() -> None:
    text = "Summarize the report below.\n\n" + (DOC + "\n\n") * 2000 + "Keep it short."
    assert len(text) > 20 * SCAN_CHARS
    ask, kinds = split_ask(text)
    assert ask in ("Summarize the report below.", "Keep it short.") and kinds == {"prose"}


@pytest.mark.parametrize(
    ("content", "needs"),
    [
        (f"Summarize this in three bullet points.\n\n{DOC}", False),
        (f"Terjemahkan ke bahasa Inggris ya.\n\n{DOC}", False),
        (f"Here's the code and the error. What's the root cause and the cleanest fix?\n\n{CODE}\n\n{TRACE}", True),
        ("Write a short letter to my landlord to prove that I paid the deposit in full.", False),
        ("Is 391 prime?", True),
    ],
)
def test_the_shipped_model_reads_the_task(content: str, needs: bool) -> None:
    model = ClassifierModel.load()
    signals = read_signals(chat(messages=[{"role": "user", "content": content}]), model)
    assert (signals.score >= model.threshold) is needs, model.top(set(signals.features))
