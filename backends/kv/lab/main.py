"""[io] The lab's entry point in the worker venv: ``python -m backends.kv.lab --model-dir DIR ...``.

``kvgate kv-lab`` (``backends.kv.lab.launch``) runs this with the worker venv's python, so torch
and transformers never enter the gateway's environment. It loads the model, runs the studies,
prints one table per study to stdout, progress bars to stderr, and writes to ``--out`` (the
record after each study, so a long run's first study survives an interrupted second):

- ``kv-lab.json``: ``{"model", "settings", "seconds", "fp8": {calibration, held_out, numerics:
  {variant: [per layer {layer, k_rel_err, v_rel_err, attn_kl}]}, end_to_end: {variant: {...}},
  findings, scales_checkpoint}, "pruning": {settings, summary: [rows], error_profile, tasks}}``;
- ``fp8_error_per_layer.png``, ``pruning_agreement.png``, ``pruning_error_position.png``;
- ``vllm-fp8-kv-tensor/``: the model with calibrated per-tensor E4M3 scales, in vLLM's form
  (``backends.kv.lab.scales``); ``kv_scales_head.safetensors``: the per-head ones.

Exit codes: 0 done, 2 refused arguments (argparse).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from backends.evalset import load_eval
from backends.kv.lab import prompts, report


class Bars:
    """One tqdm bar per stage on stderr (the progress callback of the studies)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled, self.bars = enabled, {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(stage)
        if bar is None:
            bar = self.bars[stage] = tqdm(total=total, desc=stage, file=sys.stderr, leave=True, dynamic_ncols=True)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kvgate kv-lab", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="Hugging Face model directory (Llama family)")
    p.add_argument("--study", choices=("fp8", "pruning", "all"), default="all")
    p.add_argument("--out", required=True, help="directory for kv-lab.json, plots and the scales checkpoint")
    p.add_argument("--eval", help="JSONL eval set (default: the packaged one)")
    p.add_argument("--eval-limit", type=int, help="use only the first N eval questions")
    p.add_argument("--long-count", type=int, default=3, help="long tasks (default 3: one of each kind)")
    p.add_argument("--long-words", type=int, default=750, help="words per long task (default 750, ~1k tokens)")
    p.add_argument("--max-layers", type=int, help="truncate the model to its first N layers (tests)")
    p.add_argument("--threads", type=int, help="torch threads (default: the CPUs this process may use)")
    p.add_argument("--budgets", type=float, nargs="+", default=[0.2, 0.4, 0.6, 0.8], help="kept fractions")
    p.add_argument("--policies", nargs="+", default=None, help="pruning policies (default: all)")
    p.add_argument("--tail", type=int, default=128, help="teacher-forced tokens scored after the pruned prefix")
    p.add_argument("--max-new-tokens", type=int, default=24, help="greedy tokens per eval answer (as kv-check)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.long_count < 1 or args.long_words < 50 or any(not 0 < b <= 1 for b in args.budgets):
        p.error("--long-count >= 1, --long-words >= 50 and budgets in (0, 1] are required")
    if args.eval_limit is not None and args.eval_limit < 2:
        p.error("--eval-limit: at least 2 (one calibration and one held-out question)")
    return args


def run_fp8(lab: Any, args: argparse.Namespace, long_tasks: list[prompts.LongTask], out: Path,
            bars: Bars) -> dict[str, Any]:
    from backends.kv.lab import scales, study_fp8

    items = load_eval(args.eval)[: args.eval_limit]
    calibration_long = prompts.long_tasks(max(1, len(long_tasks) // 3), args.long_words, seed=1)
    settings = study_fp8.Fp8Settings(max_new_tokens=args.max_new_tokens)
    record, calibrator = study_fp8.run_study(lab, items, long_tasks, calibration_long, settings, bars)
    record["findings"] = report.fp8_findings(record)
    k, v = calibrator.scales("e4m3", "tensor")
    checkpoint = scales.write_vllm_checkpoint(Path(args.model_dir), out / "vllm-fp8-kv-tensor", k, v, "tensor")
    record["scales_checkpoint"] = str(checkpoint)
    kh, vh = calibrator.scales("e4m3", "head")
    from safetensors.torch import save_file

    save_file(scales.scale_tensors(kh, vh), str(out / "kv_scales_head.safetensors"))
    record["scales"]["e4m3"]["k_scale_tensor"] = [float(x) for x in k]
    record["scales"]["e4m3"]["v_scale_tensor"] = [float(x) for x in v]
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from backends.kv.lab import engine, pruning, study_pruning

    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bars = Bars(not args.no_progress)
    lab = engine.load_model(args.model_dir, max_layers=args.max_layers, threads=args.threads)
    long_tasks = prompts.long_tasks(args.long_count, args.long_words, seed=0)
    record: dict[str, Any] = {"model": str(args.model_dir), "threads": torch.get_num_threads(),
                              "layers": lab.num_layers, "kv_heads": lab.num_kv_heads, "head_dim": lab.head_dim, "settings": {k: v for k, v in vars(args).items()},
                              "long_tokens": [len(lab.tokenizer.encode(t.text)) for t in long_tasks]}
    plots: list[Path] = []

    def save() -> None:
        record["seconds"] = round(time.monotonic() - started, 1)
        record["plots"] = [str(p) for p in plots]
        (out / "kv-lab.json").write_text(json.dumps(record, indent=1, default=str) + "\n")

    if args.study in ("fp8", "all"):
        record["fp8"] = run_fp8(lab, args, long_tasks, out, bars)
        print("FP8 study (held-out split; numerics per layer, end to end on the dequantized cache)\n"
              + report.fp8_table(record["fp8"]) + "\n\nper layer\n" + report.layer_table(record["fp8"]) + "\n",
              flush=True)
        if not args.no_plots:
            plots += report.plot_fp8(record["fp8"], out)
        save()
    if args.study in ("pruning", "all"):
        settings = study_pruning.PruningSettings(policies=tuple(args.policies or pruning.POLICIES),
                                                 budgets=tuple(args.budgets), tail=args.tail)
        record["pruning"] = study_pruning.run_study(lab, long_tasks, settings, bars)
        print(f"pruning study ({len(long_tasks)} long tasks, {record['long_tokens']} tokens; last {args.tail} "
              "teacher-forced, then greedy answers)\n" + report.pruning_table(record["pruning"]["summary"]) + "\n",
              flush=True)
        if not args.no_plots:
            plots += report.plot_pruning(record["pruning"], out)
    save()
    print(f"wrote {out / 'kv-lab.json'}" + "".join(f"\nwrote {p}" for p in plots) + f"\n({record['seconds']} s)",
          flush=True)
    return 0
