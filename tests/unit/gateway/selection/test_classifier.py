"""The shipped classifier: in sync with the labeled corpus, cue lexicon consistent, sane on examples."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gateway.selection.classifier import MODEL_PATH, ClassifierModel, sigmoid
from gateway.selection.features import CUES, words

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "data/routing/requests.jsonl"


@pytest.fixture(scope="module")
def model() -> ClassifierModel:
    return ClassifierModel.load()


def test_the_model_was_trained_on_the_data_in_the_repo() -> None:
    shipped = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    assert shipped["data_sha256"] == hashlib.sha256(DATA.read_bytes()).hexdigest(), (
        "data/routing/requests.jsonl changed: rebuild with scripts/train_route_classifier.py"
    )
    assert 0 < shipped["threshold"] < 1 and shipped["cross_validation"]["recall"] >= 0.9
    assert len(MODEL_PATH.read_bytes()) < 200_000


def test_the_corpus_is_large_bilingual_varied_and_split_by_template() -> None:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 2000 and len({row["id"] for row in rows}) == len(rows)
    assert sum(row["lang"] != "en" for row in rows) >= 0.25 * len(rows) and any(r["lang"] == "mixed" for r in rows)
    assert 0.35 <= sum(row["needs_reasoning"] for row in rows) / len(rows) <= 0.65
    bodies = [row["request"] for row in rows]
    assert sum(any(m["role"] == "system" for m in b["messages"]) for b in bodies) >= 400
    assert sum(sum(m["role"] == "user" for m in b["messages"]) > 1 for b in bodies) >= 300
    assert sum("tools" in b for b in bodies) >= 50 and sum("response_format" in b for b in bodies) >= 50
    splits = {split: {row["source"] for row in rows if row["split"] == split} for split in ("train", "test_in", "test_cross")}
    assert splits["test_cross"] and not splits["test_cross"] & (splits["train"] | splits["test_in"])
    for split in splits:
        group = [row for row in rows if row["split"] == split]
        assert len(group) >= 300 and any(row["tricky"] for row in group), split


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


def test_unknown_features_weigh_nothing_and_sigmoid_is_safe() -> None:
    model = ClassifierModel(bias=-1.0, weights={"prove": 3.0}, threshold=0.5)
    assert model.logit("zzz") == -1.0 and model.logit("prove") == 2.0
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0


def test_top_names_the_heaviest_known_features() -> None:
    model = ClassifierModel(bias=0.0, weights={"a": 0.5, "b": -2.0, "c": 1.0}, threshold=0.5)
    assert model.top({"a", "b", "c", "zzz"}, 2) == [("b", -2.0), ("c", 1.0)]


def test_load_rejects_a_file_that_is_not_a_model(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"bias": 1}')
    with pytest.raises(ValueError, match="not a route classifier model"):
        ClassifierModel.load(bad)
