"""The eval set, answer judging, and the pure side-by-side comparison of kv-check."""

from __future__ import annotations

import pytest

from backends.errors import BackendError
from backends.evalset import is_correct, load_eval, parse_eval, tokens
from backends.kv.check import Sample, WorkerRun, compare, format_disagreements, format_table


@pytest.mark.parametrize(("output", "answers", "ok"), [
    ("The capital of France is Paris.", ["paris"], True),
    ("PARIS!", ["paris"], True),
    ("Parisian food", ["paris"], False),
    ("2 + 2 = 4", ["4", "four"], True),
    ("2 + 12 = 14", ["4"], False),
    ("The freezing point of water is -18.0°C.", ["0", "zero"], False),
    ("Water freezes at 0 degrees.", ["0"], True),
    ("The formula is H2O.", ["h2o"], True),
    ("It has twenty-five", ["twenty five"], True),
    ("The capital of India is New Delhi.", ["new delhi"], True),
    ("New York and Delhi", ["new delhi"], False),
    ("", ["x"], False),
])
def test_is_correct(output: str, answers: list[str], ok: bool) -> None:
    assert is_correct(output, answers) is ok


def test_tokens() -> None:
    assert tokens("H2O at -18.0°C, twenty-five!") == ["h", "2", "o", "at", "18.0", "c", "twenty", "five"]


def test_packaged_eval_set() -> None:
    items = load_eval()
    assert 30 <= len(items) <= 50
    assert len({i.id for i in items}) == len(items)
    assert all(item.question.strip() and item.answers for item in items)
    assert items[0].question == "What is the capital of France?" and items[0].answers == ("paris",)


@pytest.mark.parametrize(("text", "match"), [
    ('{"id": "a", "question": "q"}', ":1: expected"),
    ('not json', ":1: expected"),
    ('{"id": "a", "question": "q", "answers": []}', ":1: no answers"),
    ('{"id": "a", "question": "q", "answers": ["x"]}\n\n{"id": "a", "question": "r", "answers": ["y"]}', "duplicate ids"),
])
def test_bad_eval_sets(text: str, match: str) -> None:
    with pytest.raises(BackendError, match=match):
        parse_eval(text, "set.jsonl")


def run(label: str, dtype: str, verdicts: str, tokens_: int | None, ttft: float = 0.1, decode: float = 0.5) -> WorkerRun:
    samples = tuple(Sample(f"q{i}", "yes" if v == "1" else "no", v == "1", ttft, 11, decode)
                    for i, v in enumerate(verdicts))
    return WorkerRun(label, dtype, samples, tokens_)


@pytest.mark.parametrize(("base", "cand", "max_drop", "min_agree", "passed"), [
    ("1111111111", "1111111111", 0.05, 0.0, True),
    ("1111111111", "1111111110", 0.05, 0.0, False),  # -10 points
    ("1111111111", "1111111110", 0.10, 0.0, True),
    ("1111100000", "0000011111", 0.05, 0.0, True),  # same accuracy...
    ("1111100000", "0000011111", 0.05, 0.5, False),  # ...but no agreement
    ("1111111110", "1111111111", 0.0, 0.0, True),  # improvement
])
def test_verdict(base: str, cand: str, max_drop: float, min_agree: float, passed: bool) -> None:
    result = compare(run("auto", "auto", base, 100), run("fp8", "fp8", cand, 200), max_accuracy_drop=max_drop,
                     min_agreement=min_agree)
    assert result.passed is passed
    assert result.to_dict()["passed"] is passed


def test_table_side_by_side() -> None:
    result = compare(run("auto", "auto", "1111111111", 46_592, ttft=0.12, decode=0.5),
                     run("fp8", "fp8", "1111111110", 93_184, ttft=0.2, decode=0.25))
    assert format_table(result).splitlines() == [
        "                      auto            fp8",
        "kv cache dtype        auto            fp8",
        "accuracy              10/10 (100.0%)  9/10 (90.0%)",
        "KV capacity (tokens)  46,592          93,184 (2.00x)",
        "TTFT p50 (ms)         120             200",
        "decode (tokens/s)     20.0            40.0",
        "answer agreement: 9/10 same verdict (90.0%), 9/10 identical text (90.0%)",
        "FAIL: accuracy drop 10.0 points (max 5.0)",
    ]


def test_decode_rate_is_a_ratio_of_sums() -> None:
    samples = (Sample("a", "x", True, 0.1, 11, 1.0), Sample("b", "x", True, 0.1, 3, 1e-6), Sample("c", "", False, None, 1, None))
    assert WorkerRun("w", "fp8", samples, None).decode_tok_s == pytest.approx(12 / (1.0 + 1e-6))


def test_mismatched_runs_are_refused() -> None:
    with pytest.raises(ValueError, match="same"):
        compare(run("a", "auto", "11", 1), run("b", "fp8", "111", 1))


def test_disagreements_list_both_answers() -> None:
    result = compare(run("auto", "auto", "110", 1), run("fp8", "fp8", "101", 1))
    assert format_disagreements(result).splitlines() == [
        "2 question(s) with different verdicts:",
        "  q1", "    auto     right: yes", "    fp8      wrong: no",
        "  q2", "    auto     wrong: no", "    fp8      right: yes",
    ]
    assert format_disagreements(result, limit=1).splitlines()[-1] == "  ... and 1 more"
    same = compare(run("auto", "auto", "11", 1), run("fp8", "fp8", "11", 1))
    assert format_disagreements(same).startswith("no question")
