"""Tokenizer, chat template and the output policy (lengths, text, reasoning, determinism)."""

from __future__ import annotations

import random

import pytest

from backends.sim.output import WORDS, OutputLength, OutputPolicy
from backends.sim.presets import SMOLLM2_SYSTEM_PROMPT
from backends.sim.tokenizer import SPECIAL_TOKENS, SimTokenizer


@pytest.mark.parametrize(
    ("text", "count"),
    [("What is the capital of France?", 7), ("12345", 5), ("", 0), ("tokenization", 2)],
)
def test_token_counts(text: str, count: int) -> None:
    assert len(SimTokenizer().encode(text)) == count


def test_pieces_round_trip_and_ids_are_stable_across_instances() -> None:
    text = "Hello, world!\n\nNew   line_with 42 numbers."
    first, second = SimTokenizer(), SimTokenizer()
    assert "".join(first.pieces(text)) == text
    assert first.encode(text) == second.encode(text)
    assert first.decode(first.encode(text)) == text


def test_chat_template_is_chatml_and_shares_prefixes() -> None:
    tok = SimTokenizer()
    system = {"role": "system", "content": "You are terse."}
    one = tok.apply_chat_template([system, {"role": "user", "content": "a"}])
    two = tok.apply_chat_template([system, {"role": "user", "content": "b"}])
    start, end = SPECIAL_TOKENS["<|im_start|>"], SPECIAL_TOKENS["<|im_end|>"]
    assert one[0] == start and one.count(start) == 3 and one.count(end) == 2
    common = next(i for i, (x, y) in enumerate(zip(one, two, strict=False)) if x != y)
    assert common > 5


def test_default_system_prompt_only_when_none_given() -> None:
    tok = SimTokenizer(default_system_prompt=SMOLLM2_SYSTEM_PROMPT)
    plain = SimTokenizer()
    user = [{"role": "user", "content": "hi"}]
    assert len(tok.apply_chat_template(user)) > len(plain.apply_chat_template(user))
    with_system = [{"role": "system", "content": "x"}, *user]
    assert tok.apply_chat_template(with_system) == plain.apply_chat_template(with_system)


def test_content_parts_are_joined() -> None:
    tok = SimTokenizer()
    parts = [{"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "text", "text": " c"}]}]
    assert tok.apply_chat_template(parts) == tok.apply_chat_template(
        [{"role": "user", "content": "a b c"}])


@pytest.mark.parametrize(
    ("spec", "max_tokens", "room", "expected"),
    [
        ("max", 10, 100, (10, True)),
        ("max", None, 100, (100, True)),  # default_tokens 256 capped by the room
        ("fixed:5", 10, 100, (5, False)),
        ("fixed:50", 10, 100, (10, True)),
        ("max", 10, 4, (4, True)),
    ],
)
def test_output_lengths(spec: str, max_tokens: int | None, room: int,
                        expected: tuple[int, bool]) -> None:
    assert OutputLength.parse(spec).sample(random.Random(0), max_tokens, room) == expected


@pytest.mark.parametrize("spec", ["uniform:5:9", "lognormal:20:0.5"])
def test_random_lengths_are_bounded(spec: str) -> None:
    length = OutputLength.parse(spec)
    rng = random.Random(1)
    values = [length.sample(rng, 30, 1000)[0] for _ in range(200)]
    assert min(values) >= 1 and max(values) <= 30 and len(set(values)) > 2


@pytest.mark.parametrize("spec", ["", "fixed", "uniform:1", "poisson:3", "fixed:-1"])
def test_bad_length_specs(spec: str) -> None:
    with pytest.raises(ValueError):
        OutputLength.parse(spec)


def test_output_plan_is_deterministic_per_seed_and_prompt() -> None:
    policy = OutputPolicy(OutputLength.parse("uniform:5:50"), reasoning_fraction=0.25, seed=3)
    a, b = policy.plan(123, 100, 1000), policy.plan(123, 100, 1000)
    other = OutputPolicy(OutputLength.parse("uniform:5:50"), seed=4).plan(123, 100, 1000)
    assert a == b and a != other
    assert a.reasoning_tokens == round(0.25 * a.num_tokens)
    assert all(p in WORDS for p in a.pieces)
    tok = SimTokenizer()
    assert len(tok.encode("".join(a.pieces))) == a.num_tokens
