"""Pure core of ``kvgate kv-check``: compare a baseline KV dtype (``auto``) with FP8, side by side.

Input: one :class:`Sample` per eval question per worker (greedy output, correctness, timings)
and each worker's reported KV capacity. :func:`compare` derives the figures, :func:`format_table`
prints them, :attr:`Comparison.passed` is the verdict.

Figures, per worker: accuracy (correct / questions), TTFT median (seconds from sending the
request to the first content token), decode throughput (tokens after the first, summed over
the questions, divided by the summed time from first to last content token; a ratio of sums, so
one answer whose tokens arrived in one read cannot dominate it) and KV
capacity (tokens, as the worker reports it). Between the two: answer agreement, the share of
questions on which both are right or both wrong, and identical-text agreement.

Verdict: the check fails when ``baseline accuracy - candidate accuracy`` exceeds
``max_accuracy_drop`` (a fraction; default 0.05, i.e. 5 points), or when the verdict agreement
falls below ``min_agreement`` (default 0: not checked).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One greedy answer."""

    item_id: str
    text: str
    correct: bool
    ttft_s: float | None
    completion_tokens: int
    decode_s: float | None
    """Seconds from the first to the last content token (None with fewer than two tokens)."""


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """Every answer of one worker, and its KV cache."""

    label: str
    kv_cache_dtype: str
    samples: tuple[Sample, ...]
    kv_cache_tokens: int | None

    @property
    def accuracy(self) -> float:
        return sum(s.correct for s in self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def ttft_p50_s(self) -> float | None:
        values = [s.ttft_s for s in self.samples if s.ttft_s is not None]
        return statistics.median(values) if values else None

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over the time they took, summed over all answers."""
        timed = [s for s in self.samples if s.decode_s and s.completion_tokens > 1]
        seconds = sum(s.decode_s or 0.0 for s in timed)
        return sum(s.completion_tokens - 1 for s in timed) / seconds if seconds > 0 else None


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: WorkerRun
    candidate: WorkerRun
    verdict_agreement: float
    text_agreement: float
    max_accuracy_drop: float
    min_agreement: float

    @property
    def accuracy_drop(self) -> float:
        return self.baseline.accuracy - self.candidate.accuracy

    @property
    def passed(self) -> bool:
        return self.accuracy_drop <= self.max_accuracy_drop + 1e-9 and self.verdict_agreement >= self.min_agreement

    def to_dict(self) -> dict[str, object]:
        def run(r: WorkerRun) -> dict[str, object]:
            return {"label": r.label, "kv_cache_dtype": r.kv_cache_dtype, "accuracy": round(r.accuracy, 4),
                    "correct": sum(s.correct for s in r.samples), "questions": len(r.samples),
                    "kv_cache_tokens": r.kv_cache_tokens, "ttft_p50_s": r.ttft_p50_s, "decode_tok_s": r.decode_tok_s}
        return {"baseline": run(self.baseline), "candidate": run(self.candidate),
                "verdict_agreement": round(self.verdict_agreement, 4), "text_agreement": round(self.text_agreement, 4),
                "accuracy_drop": round(self.accuracy_drop, 4), "max_accuracy_drop": self.max_accuracy_drop,
                "min_agreement": self.min_agreement, "passed": self.passed}


def compare(baseline: WorkerRun, candidate: WorkerRun, *, max_accuracy_drop: float = 0.05,
            min_agreement: float = 0.0) -> Comparison:
    """Side-by-side figures; both runs must answer the same questions in the same order."""
    ids = [s.item_id for s in baseline.samples]
    if ids != [s.item_id for s in candidate.samples] or not ids:
        raise ValueError("baseline and candidate must answer the same, non-empty list of questions")
    pairs = list(zip(baseline.samples, candidate.samples, strict=True))
    verdicts = sum(a.correct == b.correct for a, b in pairs) / len(pairs)
    texts = sum(a.text.strip() == b.text.strip() for a, b in pairs) / len(pairs)
    return Comparison(baseline, candidate, verdicts, texts, max_accuracy_drop, min_agreement)


def _fmt_tokens(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _rows(c: Comparison) -> Sequence[tuple[str, str, str]]:
    b, k = c.baseline, c.candidate
    ratio = (f" ({k.kv_cache_tokens / b.kv_cache_tokens:.2f}x)"
             if b.kv_cache_tokens and k.kv_cache_tokens else "")
    n = len(b.samples)
    def acc(r: WorkerRun) -> str:
        return f"{sum(s.correct for s in r.samples)}/{n} ({r.accuracy * 100:.1f}%)"
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.0f}"
    def rate(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"
    return [
        ("kv cache dtype", b.kv_cache_dtype, k.kv_cache_dtype),
        ("accuracy", acc(b), acc(k)),
        ("KV capacity (tokens)", _fmt_tokens(b.kv_cache_tokens), _fmt_tokens(k.kv_cache_tokens) + ratio),
        ("TTFT p50 (ms)", ms(b.ttft_p50_s), ms(k.ttft_p50_s)),
        ("decode (tokens/s)", rate(b.decode_tok_s), rate(k.decode_tok_s)),
    ]


def format_table(c: Comparison) -> str:
    """The side-by-side table and the verdict line."""
    rows = [("", c.baseline.label, c.candidate.label), *_rows(c)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    n = len(c.baseline.samples)
    lines.append(f"answer agreement: {round(c.verdict_agreement * n)}/{n} same verdict "
                 f"({c.verdict_agreement * 100:.1f}%), {round(c.text_agreement * n)}/{n} identical text "
                 f"({c.text_agreement * 100:.1f}%)")
    verdict = "PASS" if c.passed else "FAIL"
    line = f"{verdict}: accuracy drop {c.accuracy_drop * 100:.1f} points (max {c.max_accuracy_drop * 100:.1f})"
    if c.min_agreement:
        line += f", same-verdict agreement {c.verdict_agreement * 100:.1f}% (min {c.min_agreement * 100:.1f}%)"
    lines.append(line)
    return "\n".join(lines)


def format_disagreements(c: Comparison, limit: int = 10) -> str:
    """The questions on which the two verdicts differ, with both answers (at most ``limit``)."""
    pairs = [(a, b) for a, b in zip(c.baseline.samples, c.candidate.samples, strict=True) if a.correct != b.correct]
    if not pairs:
        return "no question answered right by one worker and wrong by the other"
    def mark(s: Sample) -> str:
        return ("right" if s.correct else "wrong") + ": " + " ".join(s.text.split())[:70]
    lines = [f"{len(pairs)} question(s) with different verdicts:"]
    for a, b in pairs[:limit]:
        lines += [f"  {a.item_id}", f"    {c.baseline.label:<8} {mark(a)}", f"    {c.candidate.label:<8} {mark(b)}"]
    if len(pairs) > limit:
        lines.append(f"  ... and {len(pairs) - limit} more")
    return "\n".join(lines)
