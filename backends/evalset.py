"""The FP8 regression eval set: short questions with known answers, and how answers are judged.

The set ships in the package (``backends/data/kv_eval.jsonl``, written for kvgate): 50 questions
(capitals, small arithmetic, counts, colours, everyday facts) that SmolLM2-135M-Instruct mostly
answers right with greedy decoding, one JSON object per line::

    {"id": "capital-france", "question": "What is the capital of France?", "answers": ["paris"]}

Judging (:func:`is_correct`): both texts are lower-cased and split into tokens, numbers
(``18.0``) or runs of letters; an output is correct when the tokens of any accepted answer appear
contiguously in it. So "The capital of France is Paris." contains ``paris``, "H2O" contains
``h2o``, "twenty-five" matches ``twenty five``, and "-18.0 C" does not contain ``0``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from backends.errors import BackendError

_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+")


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One question and its accepted answers."""

    id: str
    question: str
    answers: tuple[str, ...]


def tokens(text: str) -> list[str]:
    """Lower-cased number and word tokens of ``text``."""
    return _TOKEN.findall(text.lower())


def is_correct(output: str, answers: tuple[str, ...] | list[str]) -> bool:
    """True if the tokens of any answer appear contiguously among ``output``'s tokens."""
    have = tokens(output)
    for answer in answers:
        want = tokens(answer)
        if want and any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)):
            return True
    return False


def parse_eval(text: str, source: str = "eval set") -> list[EvalItem]:
    """Items of a JSONL eval set; :class:`BackendError` names the bad line."""
    items: list[EvalItem] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            item = EvalItem(str(row["id"]), str(row["question"]), tuple(str(a) for a in row["answers"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendError(f"{source}:{number}: expected {{id, question, answers}}: {exc}") from exc
        if not item.answers:
            raise BackendError(f"{source}:{number}: no answers")
        items.append(item)
    if len({item.id for item in items}) != len(items):
        raise BackendError(f"{source}: duplicate ids")
    return items


def load_eval(path: str | Path | None = None) -> list[EvalItem]:
    """[io] The eval set at ``path``, or the packaged one."""
    if path is None:
        text = resources.files("backends").joinpath("data", "kv_eval.jsonl").read_text()
        return parse_eval(text, "kv_eval.jsonl")
    return parse_eval(Path(path).read_text(), str(path))
