"""The lab's output: terminal tables, the findings kv-check points to, and the PNG plots.

Pure Python except :func:`plot_fp8` / :func:`plot_pruning` (matplotlib, Agg backend, imported
when called). Inputs are the JSON-ready records the studies return (see ``backends.kv.lab.main``
for the record's layout), so the gateway side can read and print them too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).rjust(widths[i]) if i else str(c).ljust(widths[i]) for i, c in enumerate(row))
             for row in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _worst(layers: Sequence[Mapping[str, float]], key: str) -> tuple[float, float, int]:
    values = [row[key] for row in layers]
    worst = max(range(len(values)), key=values.__getitem__)
    return sum(values) / len(values), values[worst], worst


def fp8_table(fp8: Mapping[str, Any]) -> str:
    """One row per variant: numerics (mean / worst layer) and the end-to-end figures."""
    header = ["variant", "K rel err mean/max (layer)", "V rel err mean/max (layer)", "attn KL mean/max (layer)",
              "ppl", "ppl change", "top-1", "eval same text", "eval same verdict", "long same"]
    rows = []
    e2e = fp8.get("end_to_end", {})
    for variant, layers in fp8["numerics"].items():
        cells = [variant]
        for key, fmt in (("k_rel_err", "{:.4f}"), ("v_rel_err", "{:.4f}"), ("attn_kl", "{:.2e}")):
            mean, worst, at = _worst(layers, key)
            cells.append(f"{fmt.format(mean)} / {fmt.format(worst)} ({at})")
        e = e2e.get(variant)
        if e:
            n = e["eval_questions"]
            cells += [f"{e['ppl']:.3f}", f"{e['ppl_change'] * 100:+.2f}%", _pct(e["top1"]),
                      f"{e['eval_same_text']}/{n}", f"{e['eval_same_verdict']}/{n}",
                      f"{e['long_same']}/{e['long_tasks']}"]
        else:
            cells += ["-"] * 6
        rows.append(cells)
    ref = e2e.get("reference")
    if ref:
        n = ref["eval_questions"]
        rows.append(["reference (fp32)", "0", "0", "0", f"{ref['ppl']:.3f}", "+0.00%", "100.0%",
                     f"right {ref['eval_right']}/{n}", "", f"right {ref['long_right']}/{ref['long_tasks']}"])
    return _table(header, rows)


def layer_table(fp8: Mapping[str, Any], variants: Sequence[str] = ("e4m3/unit", "e4m3/tensor", "e5m2/unit")) -> str:
    """Per layer: attention KL of a few variants (the per-layer findings kv-check points to)."""
    variants = [v for v in variants if v in fp8["numerics"]]
    header = ["layer", *[f"KL {v}" for v in variants], *[f"K err {v}" for v in variants]]
    n = len(fp8["numerics"][variants[0]]) if variants else 0
    rows = [[str(i), *[f"{fp8['numerics'][v][i]['attn_kl']:.2e}" for v in variants],
             *[f"{fp8['numerics'][v][i]['k_rel_err']:.4f}" for v in variants]] for i in range(n)]
    return _table(header, rows)


def pruning_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One row per policy and budget."""
    header = ["policy", "keep", "ppl", "ppl change", "top-1", "first error (tok)", "answers same",
              "answers right", "answer diverges at", "after divergence"]
    out = []
    for r in rows:
        n = r["tasks"]
        div = "-" if r["answer_divergence"] is None else f"{r['answer_divergence']:.1f}"
        out.append([r["policy"], f"{r['keep'] * 100:.0f}%", f"{r['ppl']:.3f}", f"{r['ppl_change'] * 100:+.1f}%",
                    _pct(r["top1"]), f"{r['first_error']:.1f}", f"{r['answers_same']}/{n}",
                    f"{r['answers_right']}/{n}", div, _pct(r["after_divergence"])])
    return _table(header, out)


def fp8_findings(fp8: Mapping[str, Any], top: int = 3) -> dict[str, Any]:
    """What kv-check quotes: the layers most distorted under vLLM's default FP8 (E4M3, unit scales)."""
    out: dict[str, Any] = {}
    for variant in ("e4m3/unit", "e4m3/tensor", "e5m2/unit"):
        layers = fp8["numerics"].get(variant)
        if layers:
            ranked = sorted(layers, key=lambda row: row["attn_kl"], reverse=True)[:top]
            out[variant] = [{"layer": r["layer"], "attn_kl": r["attn_kl"], "k_rel_err": r["k_rel_err"],
                             "v_rel_err": r["v_rel_err"]} for r in ranked]
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fp8(fp8: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """[io] ``fp8_error_per_layer.png``: K error, V error and attention KL per layer, per variant."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for variant, layers in fp8["numerics"].items():
        xs = [r["layer"] for r in layers]
        for ax, key in zip(axes, ("k_rel_err", "v_rel_err", "attn_kl"), strict=True):
            ax.plot(xs, [max(r[key], 1e-12) for r in layers], marker=".", label=variant)
    for ax, title in zip(axes, ("K relative error", "V relative error", "attention KL (nats)"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "fp8_error_per_layer.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plot_pruning(pruning: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """[io] ``pruning_agreement.png`` (vs budget, per policy) and ``pruning_error_position.png``."""
    plt = _pyplot()
    rows = [r for r in pruning["summary"] if r["policy"] != "full"]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for policy in policies:
        mine = [r for r in rows if r["policy"] == policy]
        keeps = [r["keep"] * 100 for r in mine]
        axes[0].plot(keeps, [r["top1"] * 100 for r in mine], marker="o", label=policy)
        axes[1].plot(keeps, [r["answers_same"] / r["tasks"] * 100 for r in mine], marker="o", label=policy)
        axes[2].plot(keeps, [r["ppl_change"] * 100 for r in mine], marker="o", label=policy)
    for ax, title in zip(axes, ("teacher-forced top-1 agreement (%)", "greedy answers identical (%)",
                                "perplexity change (%)"), strict=True):
        ax.set_xlabel("kept budget (% of tokens)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    first = out_dir / "pruning_agreement.png"
    fig.savefig(first, dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, profile in pruning["error_profile"].items():
        ax.plot([(i + 0.5) / len(profile) * 100 for i in range(len(profile))], [p * 100 for p in profile],
                marker=".", label=key)
    ax.set_xlabel("position in the scored tail (%)")
    ax.set_ylabel("top-1 disagreement with the full cache (%)")
    ax.set_title("where errors appear")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    second = out_dir / "pruning_error_position.png"
    fig.savefig(second, dpi=110)
    plt.close(fig)
    return [first, second]
