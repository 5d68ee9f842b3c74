"""What the simulated worker generates: how many tokens, which text, and how much is reasoning.

- **Length.** :class:`OutputLength` is parsed from a spec string:
  ``max`` (default: exactly the request's ``max_tokens``/``max_completion_tokens``, or
  ``default_tokens`` when absent, as a benchmark with ``ignore_eos`` would), ``fixed:N``,
  ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA``. A sampled length is always capped by the
  request's ``max_tokens`` and by the context left (``max_model_len - prompt``). The finish reason
  is ``length`` when the cap cut it, ``stop`` otherwise, as in vLLM.
- **Text.** Each token is one word-piece drawn from :data:`WORDS` (each starting with a space), so
  the text is tokenized back by :mod:`backends.sim.tokenizer` into the same number of tokens.
- **Reasoning.** A reasoning profile (``reasoning_fraction`` > 0) makes the first
  ``round(fraction * n)`` tokens reasoning, streamed as ``delta.reasoning`` before any
  ``delta.content``, as vLLM does with a reasoning parser (``--reasoning-parser``).
- **Determinism.** Each request's random stream is ``random.Random(f"{seed}:{prompt_digest}")``:
  the same prompt on a worker with the same seed yields the same length and text.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

WORDS: tuple[str, ...] = tuple(
    " " + w
    for w in (
        "the of and to in is for that on with as by it at from this be are was an or which "
        "cache block token model route fast data time test over when each more than most then"
    ).split()
)
"""Output vocabulary: short words that the sim tokenizer keeps as one token each."""

_KINDS = ("max", "fixed", "uniform", "lognormal")


@dataclass(frozen=True)
class OutputLength:
    """A distribution of output lengths (see module docstring for the spec syntax)."""

    kind: str = "max"
    a: float = 0.0
    b: float = 0.0
    default_tokens: int = 256

    @classmethod
    def parse(cls, spec: str, default_tokens: int = 256) -> OutputLength:
        """Parse ``max``, ``fixed:N``, ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA``."""
        kind, *args = spec.strip().split(":")
        expected = {"max": 0, "fixed": 1, "uniform": 2, "lognormal": 2}
        if kind not in _KINDS or len(args) != expected[kind]:
            raise ValueError(f"bad output length spec {spec!r} (max | fixed:N | uniform:LO:HI | "
                             "lognormal:MEDIAN:SIGMA)")
        values = [float(x) for x in args] + [0.0, 0.0]
        if any(v < 0 for v in values):
            raise ValueError(f"negative value in output length spec {spec!r}")
        return cls(kind, values[0], values[1], default_tokens)

    def sample(self, rng: random.Random, max_tokens: int | None, room: int) -> tuple[int, bool]:
        """Draw a length; returns ``(tokens, capped)`` with ``1 <= tokens <= cap``."""
        cap = min(room, max_tokens) if max_tokens is not None else room
        if self.kind == "max":
            wanted = max_tokens if max_tokens is not None else self.default_tokens
        elif self.kind == "fixed":
            wanted = int(self.a)
        elif self.kind == "uniform":
            wanted = rng.randint(int(self.a), int(self.b))
        else:
            wanted = round(self.a * math.exp(rng.gauss(0.0, self.b)))
        wanted = max(wanted, 1)
        cap = max(cap, 1)
        return min(wanted, cap), wanted >= cap


@dataclass(frozen=True)
class OutputPlan:
    """The output of one request: its pieces and how many of them are reasoning."""

    pieces: tuple[str, ...]
    reasoning_tokens: int
    finish_reason: str

    @property
    def num_tokens(self) -> int:
        return len(self.pieces)


@dataclass(frozen=True)
class OutputPolicy:
    """Length distribution, reasoning profile and seed of a simulated worker."""

    length: OutputLength = OutputLength()
    reasoning_fraction: float = 0.0
    seed: int = 0

    def plan(self, prompt_digest: int, max_tokens: int | None, room: int) -> OutputPlan:
        """The deterministic output for a prompt (see module docstring)."""
        rng = random.Random(f"{self.seed}:{prompt_digest}")
        tokens, capped = self.length.sample(rng, max_tokens, room)
        pieces = tuple(rng.choice(WORDS) for _ in range(tokens))
        reasoning = min(tokens, round(self.reasoning_fraction * tokens))
        return OutputPlan(pieces, reasoning, "length" if capped else "stop")
