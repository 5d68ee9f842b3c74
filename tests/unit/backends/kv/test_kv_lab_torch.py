"""The KV lab's torch code, run in the worker venv (torch and transformers live only there).

Each test runs ``kv_lab_checks.py`` or ``kvgate kv-lab`` with the worker venv's python as a
subprocess. They need ``kvgate prepare`` (``make test`` runs ``make prepare`` first); without the
worker venv or the prepared model they are skipped, saying so.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends import paths
from backends.kv.lab import POLICIES
from backends.kv.lab.launch import PACKAGE_ROOT
from backends.models import SMOLLM2, is_prepared
from backends.workers.env import is_ready, venv_python

VENV = paths.worker_venv_dir()
MODEL = paths.models_dir() / SMOLLM2.dir_name
CHECKS = Path(__file__).with_name("kv_lab_checks.py")

needs_worker_env = pytest.mark.skipif(not is_ready(VENV), reason=f"worker venv absent at {VENV}: run `make prepare`")
needs_model = pytest.mark.skipif(not is_prepared(MODEL), reason=f"model absent at {MODEL}: run `make prepare`")


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every check of ``kv_lab_checks.py``, run once by the worker venv's python."""
    if not is_ready(VENV):
        pytest.skip(f"worker venv absent at {VENV}: run `make prepare`")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    done = subprocess.run([str(venv_python(VENV)), str(CHECKS), str(tmp_path_factory.mktemp("kv-lab-checks"))],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_lab_attention_matches_transformers_and_every_cache_path(checks: dict) -> None:
    r = checks["attention"]
    assert r["vs_sdpa"] < 1e-4, r
    assert r["incremental"] < 1e-4 and r["chunked"] < 1e-4, r
    assert r["pruned_keep_all"] < 1e-4, r
    assert r["batch_equals_single"], r


def test_fp8_round_trips(checks: dict) -> None:
    r = checks["numerics"]
    assert r["exact_e4m3"] == [0.5, 1.0, 1.125, -448.0, 2.0 ** -9]
    assert r["saturates"] == 448.0
    assert r["e4m3_underflow"] == 0.0 and r["e5m2_keeps_small"] > 0
    err = r["err"]
    assert err["bf16"] < 0.005 < err["e4m3"] < 0.04 < err["e5m2"] < 0.08, err
    assert r["per_head_scale_shape"] == [2]
    assert r["per_head_scale"] == pytest.approx([a / 448 for a in r["amax_per_head"]], rel=1e-5)
    identical, e4m3, e5m2 = r["kl"]
    assert identical == pytest.approx(0.0, abs=1e-6) and 0 < e4m3 < e5m2, r["kl"]


def test_caches_pruning_policies_and_vllm_scales(checks: dict) -> None:
    r = checks["caches"]
    assert r["quantized_cache_exact"] and r["quantized_differs"]
    for policy in POLICIES:
        p = r[policy]
        assert p["prefill_kept"] == math.ceil(0.3 * 150) and p["seen"] == 150 + 50 + 4, p
        assert p["nll"] == 50 and p["answer"] == 5 and p["sorted"], p
        if policy == "snapkv":
            assert p["kept_end"] == p["budget"] + 4, p  # prompt compressed, decoded tokens appended
        else:
            assert p["kept_end"] == p["budget"] == math.ceil(0.3 * 204), p
    assert r["streaming"]["positions"] == [0, 1, 2, 3, *range(150 - 41, 150)]
    assert r["h2o"]["positions"][-22:] == list(range(128, 150))
    assert r["h2o_select"] == [[3, 6, 8, 9]] and r["streaming_select"] == [[0, 1, 2, 3, 8, 9]]
    s = r["scales"]
    assert s["k"] == pytest.approx([2 / 448, 8 / 448]) and s["v"] == pytest.approx([4 / 448, 1 / 448])
    assert s["k_head_1"] == pytest.approx([1 / 448, 8 / 448])
    assert s["config"]["quantization_config"]["quant_method"] == "compressed-tensors"
    assert s["config"]["quantization_config"]["kv_cache_scheme"] == {
        "num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
    assert s["tensors"] == {"model.layers.0.self_attn.k_scale": [pytest.approx(2 / 448)],
                            "model.layers.0.self_attn.v_scale": [pytest.approx(4 / 448)],
                            "model.layers.1.self_attn.k_scale": [pytest.approx(8 / 448)],
                            "model.layers.1.self_attn.v_scale": [pytest.approx(1 / 448)]}
    assert s["linked"] == "weights"


@needs_worker_env
@needs_model
def test_kvgate_kv_lab_on_the_real_model_with_two_layers(tmp_path: Path) -> None:
    """``kvgate kv-lab --study all`` end to end, small: SmolLM2 cut to 2 layers, 4 questions."""
    out = tmp_path / "lab"
    argv = [sys.executable, "-m", "gateway.cli", "kv-lab", "--study", "all", "--out", str(out), "--max-layers", "2",
            "--eval-limit", "4", "--long-count", "1", "--long-words", "120", "--budgets", "0.5", "--tail", "24",
            "--threads", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FP8 study" in done.stdout and "pruning study" in done.stdout
    record = json.loads((out / "kv-lab.json").read_text())
    numerics = record["fp8"]["numerics"]
    assert set(numerics) == {"bf16", "e4m3/unit", "e4m3/tensor", "e4m3/head", "e5m2/unit", "e5m2/tensor", "e5m2/head"}
    for layer in range(2):
        bf16, e4m3, e5m2 = (numerics[v][layer] for v in ("bf16", "e4m3/unit", "e5m2/unit"))
        assert bf16["k_rel_err"] < e4m3["k_rel_err"] < e5m2["k_rel_err"], (bf16, e4m3, e5m2)
        assert 0 <= bf16["attn_kl"] < e5m2["attn_kl"]
    e2e = record["fp8"]["end_to_end"]
    assert e2e["reference"]["eval_questions"] == 2 and math.isfinite(e2e["e4m3/unit"]["ppl"])
    assert e2e["reference"]["top1"] == 1.0 and 0 <= e2e["e5m2/unit"]["top1"] <= 1
    checkpoint = Path(record["fp8"]["scales_checkpoint"])
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["quantization_config"]["kv_cache_scheme"]["strategy"] == "tensor"
    rows = record["pruning"]["summary"]
    assert [(r["policy"], r["keep"]) for r in rows] == [("full", 1.0), *[(p, 0.5) for p in POLICIES]]
    assert all(0 <= r["top1"] <= 1 and math.isfinite(r["ppl"]) for r in rows)
    for name in ("fp8_error_per_layer.png", "pruning_agreement.png", "pruning_error_position.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
