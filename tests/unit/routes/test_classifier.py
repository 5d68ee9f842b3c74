"""The shipped classifier: in sync with the labeled set, cue lexicon consistent, sane on examples."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gateway.routes.classifier import MODEL_PATH, ClassifierModel, sigmoid
from gateway.routes.features import CUES, HEAD_CHARS, TAIL_CHARS, clip, featurize, words

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "data/routing/prompts.jsonl"


@pytest.fixture(scope="module")
def model() -> ClassifierModel:
    return ClassifierModel.load()


def test_the_model_was_trained_on_the_data_in_the_repo() -> None:
    shipped = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    assert shipped["data_sha256"] == hashlib.sha256(DATA.read_bytes()).hexdigest(), (
        "data/routing/prompts.jsonl changed: rebuild with scripts/train_route_classifier.py"
    )
    assert 0 < shipped["threshold"] < 1 and shipped["cross_validation"]["recall"] >= 0.9
    assert len(MODEL_PATH.read_bytes()) < 200_000


def test_the_labeled_set_is_large_bilingual_and_split_by_language_and_label() -> None:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 300 and len({row["id"] for row in rows}) == len(rows)
    for lang in ("en", "id"):
        for label in (True, False):
            group = [r for r in rows if r["lang"] == lang and r["needs_reasoning"] is label]
            test = [r for r in group if r["split"] == "test"]
            assert len(group) >= 60 and 0.2 <= len(test) / len(group) <= 0.3


@pytest.mark.parametrize(
    ("prompt", "needs"),
    [
        ("Prove that the product of two odd integers is odd.", True),
        ("Buktikan bahwa jumlah dua bilangan genap adalah genap.", True),
        ("A tank leaks 3 litres an hour while a tap adds 5; starting at 20 litres, when does it hold 50? Explain.", True),
        ("Translate 'see you tomorrow' into Indonesian.", False),
        ("Terjemahkan ke bahasa Inggris: 'Saya suka kopi.'", False),
        ("Write a haiku about autumn.", False),
    ],
)
def test_obvious_prompts(model: ClassifierModel, prompt: str, needs: bool) -> None:
    assert (model.score(prompt) >= model.threshold) is needs


def test_cue_entries_are_one_or_two_tokenizer_words() -> None:
    for entry in CUES:
        tokens = words(entry.lower())
        assert 1 <= len(tokens) <= 2 and " ".join(tokens) == entry, entry


def test_featurize_kinds() -> None:
    features = featurize("Why does x^2 = 4? Prove it.\n```\ncode\n```")
    assert {"why", "^", "=", "prove it", "cue:why", "cue:proof", "shape:question", "shape:code"} <= features
    assert "shape:numbers=1-3" in features and "shape:len<120" in features


def test_long_text_is_clipped_to_head_and_tail() -> None:
    text = "a" * HEAD_CHARS + "b" * 10_000 + "c" * TAIL_CHARS
    assert clip(text) == "a" * HEAD_CHARS + "\n" + "c" * TAIL_CHARS
    assert "shape:len>=1200" in featurize(text)


def test_unknown_features_weigh_nothing_and_sigmoid_is_safe() -> None:
    model = ClassifierModel(bias=-1.0, weights={"prove": 3.0}, threshold=0.5)
    assert model.logit("zzz") == -1.0 and model.logit("prove") == 2.0
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0


def test_load_rejects_a_file_that_is_not_a_model(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"bias": 1}')
    with pytest.raises(ValueError, match="not a route classifier model"):
        ClassifierModel.load(bad)
