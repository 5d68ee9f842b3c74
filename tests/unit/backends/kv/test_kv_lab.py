"""The KV lab's torch-free parts: long inputs, tables, kv-check's pointer, the launcher, `plan --kv-keep`.

The torch side runs in the worker venv: ``test_kv_lab_torch.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from backends.errors import PlanError
from backends.kv.geometry import load_geometry
from backends.kv.planner import cpu_budget, plan
from backends.kv.lab import launch, report
from backends.kv.lab.prompts import long_tasks
from gateway.cli import main


def test_long_tasks_are_deterministic_long_and_answerable_only_from_early_tokens() -> None:
    tasks = long_tasks(6, 750, seed=0)
    assert [t.kind for t in tasks] == ["document", "arithmetic", "logic"] * 2
    assert tasks == long_tasks(6, 750, seed=0) and tasks != long_tasks(6, 750, seed=1)
    for task in tasks:
        words = task.text.split()
        assert 750 <= len(words) <= 900, (task.id, len(words))
        assert task.text.rstrip().endswith(("is", "to"))
    doc = tasks[0]
    assert doc.text.startswith("Briefing.") and doc.answers[0] in doc.text[:200]
    arithmetic = tasks[1]
    notes = re.findall(r"Note: (?:a counter starts at|add) (\d+)", arithmetic.text)
    assert len(notes) == 4 and arithmetic.text.startswith("Note: a counter starts at")
    assert arithmetic.answers == (str(sum(map(int, notes))),)
    logic = tasks[2]
    pairs = re.findall(r"Note: (\w+) is taller than (\w+)\.", logic.text)
    taller = {a for a, _ in pairs} - {b for _, b in pairs}
    assert len(pairs) == 3 and logic.answers == (taller.pop(),)
    with pytest.raises(ValueError):
        long_tasks(1, 0)


def _record() -> dict:
    layers = lambda scale: [{"layer": i, "k_rel_err": 0.02 * scale, "v_rel_err": 0.03 * scale,  # noqa: E731
                             "attn_kl": (i + 1) * 1e-3 * scale} for i in range(3)]
    e2e = {"ppl": 10.5, "ppl_change": 0.01, "top1": 0.97, "eval_questions": 25, "eval_same_text": 24,
           "eval_same_verdict": 25, "long_tasks": 3, "long_same": 3}
    fp8 = {"numerics": {"e4m3/unit": layers(1), "e5m2/unit": layers(4)},
           "end_to_end": {"e4m3/unit": e2e, "reference": {**e2e, "ppl_change": 0.0, "top1": 1.0, "eval_right": 20,
                                                          "long_right": 1}}}
    fp8["findings"] = report.fp8_findings(fp8, top=2)
    fp8["scales_checkpoint"] = "/x/vllm-fp8-kv-tensor"
    return {"fp8": fp8}


def test_fp8_table_and_findings() -> None:
    fp8 = _record()["fp8"]
    table = report.fp8_table(fp8).splitlines()
    assert table[0].startswith("variant") and len(table) == 4
    assert "0.0200 / 0.0200" in table[1] and "3.00e-03 (2)" in table[1] and "+1.00%" in table[1] and "24/25" in table[1]
    assert table[2].split()[0] == "e5m2/unit" and table[2].rstrip().endswith("-")
    assert [r["layer"] for r in fp8["findings"]["e4m3/unit"]] == [2, 1]
    assert len(report.layer_table(fp8).splitlines()) == 1 + 3


def test_pruning_table() -> None:
    rows = [{"policy": "full", "keep": 1.0, "ppl": 9.0, "ppl_change": 0.0, "top1": 1.0, "first_error": 128.0,
             "answers_same": 3, "answers_right": 1, "tasks": 3, "answer_divergence": None, "after_divergence": None},
            {"policy": "h2o", "keep": 0.2, "ppl": 12.0, "ppl_change": 1 / 3, "top1": 0.8, "first_error": 3.5,
             "answers_same": 1, "answers_right": 0, "tasks": 3, "answer_divergence": 2.0, "after_divergence": 0.9}]
    lines = report.pruning_table(rows).splitlines()
    assert lines[2].split() == ["h2o", "20%", "12.000", "+33.3%", "80.0%", "3.5", "1/3", "0/3", "2.0", "90.0%"]


def test_kv_check_points_to_the_lab_findings(tmp_path: Path) -> None:
    assert "run `kvgate kv-lab --study fp8`" in launch.findings_hint(tmp_path)
    (tmp_path / launch.RECORD_NAME).write_text(json.dumps(_record()))
    hint = launch.findings_hint(tmp_path)
    assert "e4m3/unit: layer 2 KL 3.00e-03 K err 0.020, layer 1 KL 2.00e-03" in hint
    assert "/x/vllm-fp8-kv-tensor" in hint


def test_launcher_runs_the_lab_in_the_worker_venv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVGATE_HOME", str(tmp_path))
    assert launch.default_out_dir() == tmp_path / "kv-lab"
    argv = launch.lab_argv(Path("/venv/bin/python"), Path("/m"), Path("/o"), ["--study", "fp8"])
    assert argv == ["/venv/bin/python", "-m", "backends.kv.lab", "--model-dir", "/m", "--out", "/o", "--study", "fp8"]
    assert (launch.PACKAGE_ROOT / "backends" / "kv" / "lab" / "main.py").is_file()


def test_plan_prices_a_pruning_budget() -> None:
    geometry = load_geometry("smollm2-135m")
    full = plan(geometry, kv_cache_dtype="fp8", max_model_len=2048, budget=cpu_budget(1), block_size=128)
    pruned = plan(geometry, kv_cache_dtype="fp8", max_model_len=2048, budget=cpu_budget(1), block_size=128,
                  kv_keep=0.6)
    assert (full.num_blocks, full.max_concurrency, full.pruned_concurrency) == (728, 45.5, None)
    assert pruned.kept_tokens_per_sequence == 1229  # ceil(0.6 * 2048): 10 blocks of 128
    assert (pruned.pruned_concurrency, pruned.pruned_concurrent_sequences) == (72.8, 72)
    assert pruned.covered_context_tokens == int(93_184 / 0.6)
    assert pruned.max_concurrency == full.max_concurrency and pruned.kv_cache_tokens == full.kv_cache_tokens
    for bad in (0.0, 1.5):
        with pytest.raises(PlanError, match="--kv-keep"):
            plan(geometry, kv_keep=bad)


def test_kvgate_plan_kv_keep(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "smollm2-135m", "--cpu-kvcache-space-gib", "1", "--max-model-len", "2048",
                 "--kv-keep", "0.4"]) == 0
    out = capsys.readouterr().out
    assert "keep 40% of each sequence: 820 of 2,048 tokens" in out
    assert "pruned seqs      104 of 2,048 tokens (104.0x)" in out
    assert main(["plan", "smollm2-135m", "--kv-keep", "0"]) == 2
    assert "--kv-keep: must be in (0, 1]" in capsys.readouterr().err
