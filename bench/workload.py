"""Workload generator: realistic prompt-sharing shapes with Poisson arrivals, saved as a trace.

Four shapes, mixed by weight (``WorkloadSpec.mix``), each drawing on its own seeded stream:

- ``tenant``: many tenants, each with a long system prompt shared by all its requests, then a
  short fresh question. Tenant popularity is Zipf(``tenant_zipf``): a few hot tenants, a long tail.
  (The shape of agent/assistant products; SGLang's RadixAttention and llm-d's prefix scorer
  papers use it.)
- ``session``: multi-turn chats. ``active_sessions`` conversations are open at a time; each turn
  resends the whole history plus a new user message, so turn n+1's prompt extends turn n's (the
  assistant's previous reply is synthetic text, fixed in the trace). A session ends after
  ``session_turns`` turns or before its prompt would exceed ``max_prompt_words``.
- ``docqa``: document Q&A: several questions over one long document (document first, question
  last, so the document is the shared prefix), documents picked Zipf-like.
- ``cold``: one-off prompts that share nothing.

Arrivals are a Poisson process of ``rate`` requests per second (exponential gaps). Output lengths
(``max_tokens``) are log-normal (median ``output_median``, sigma ``output_sigma``), capped at
``output_max``. Text is drawn from a list of common English words, about one token per word for
both the simulator's tokenizer and SmolLM2's, so "words" below read as "tokens".

``python -m bench.workload --profile shared-prefix --out bench/out/trace.jsonl`` writes a trace.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from bench.trace import Trace, TraceRequest, kinds, save_trace

WORDS = tuple(
    """the of and to in is that for it as was with be by on not he this are or his from at which
    but have an they you were her she there been one all we their has would when if so no what up
    out who them some could him into its then two more these time only new way may any like other
    how our over such first well year most also even many much work before through back where
    people state world still case system group number part place point right program question
    fact week company report service process data model request answer policy route cache block
    token worker queue router server client network memory storage record table value result test
    design engine budget price order market review account update change figure level power
    source target pattern region window signal metric trace event index batch stream limit""".split()
)

KINDS = ("tenant", "session", "docqa", "cold")


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of a generated workload (sizes in words, about one token each)."""

    requests: int = 400
    rate: float = 10.0
    seed: int = 0
    mix: Mapping[str, float] = field(
        default_factory=lambda: {"tenant": 0.4, "session": 0.3, "docqa": 0.2, "cold": 0.1})
    tenants: int = 8
    tenant_zipf: float = 1.0
    system_words: int = 1200
    question_words: tuple[int, int] = (15, 60)
    active_sessions: int = 12
    session_turns: tuple[int, int] = (3, 8)
    session_system_words: int = 200
    turn_words: tuple[int, int] = (20, 80)
    documents: int = 6
    document_words: int = 2500
    cold_words: tuple[int, int] = (300, 1200)
    output_median: int = 64
    output_sigma: float = 0.6
    output_max: int = 256
    max_prompt_words: int = 6000


PROFILES: Mapping[str, WorkloadSpec] = MappingProxyType({
    # 4 workers of the gpu-small-cache preset (32k tokens each): the hot set (~8 tenants x 1.2k,
    # 6 documents x 2.5k, ~12 sessions) fits the cluster but not one worker.
    "shared-prefix": WorkloadSpec(),
    # Prefix affinity at production scale (bench/routing_compare.py explains the choice): 48
    # tenants with ~3k-token agent system prompts, 24 documents of ~8k tokens, growing chats, cold
    # prompts; a hot set of ~400k tokens for 4 workers of `gpu-8b --num-blocks 8192` (131k tokens
    # each: more than one worker holds, less than the cluster does).
    "multi-tenant": WorkloadSpec(
        requests=800, rate=10.0, mix={"tenant": 0.45, "session": 0.2, "docqa": 0.25, "cold": 0.1},
        tenants=48, tenant_zipf=0.9, system_words=3000, active_sessions=16, session_system_words=400,
        documents=24, document_words=8000, cold_words=(500, 3000), max_prompt_words=12000),
    # One real vLLM-CPU worker: 2048-token context, slow prefill, so small and sequential.
    "calibration": WorkloadSpec(
        requests=24, rate=0.5, mix={"tenant": 0.5, "docqa": 0.3, "cold": 0.2}, tenants=3,
        system_words=700, question_words=(10, 30), documents=2, document_words=900,
        cold_words=(200, 900), output_median=16, output_sigma=0.3, output_max=24,
        max_prompt_words=1500),
})


def _words(rng: random.Random, count: int) -> str:
    """``count`` words as sentences of 8-16 words."""
    out: list[str] = []
    while len(out) < count:
        sentence = rng.choices(WORDS, k=min(rng.randint(8, 16), count - len(out)))
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        out.extend(sentence)
    return " ".join(out)


def _zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (rank + 1) ** s for rank in range(n)]


@dataclass
class _Session:
    group: str
    messages: list[dict[str, str]]
    turns_left: int
    words: int


class _Generator:
    """Stateful generation of one trace (all randomness from seeded streams)."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.rng = random.Random(f"{spec.seed}:arrivals")
        self.text = random.Random(f"{spec.seed}:text")
        systems = random.Random(f"{spec.seed}:systems")
        self.tenant_prompts = [f"You are the assistant of tenant {i}. " + _words(systems, spec.system_words)
                               for i in range(spec.tenants)]
        docs = random.Random(f"{spec.seed}:documents")
        self.documents = [_words(docs, spec.document_words) for _ in range(spec.documents)]
        self.sessions: list[_Session | None] = [None] * spec.active_sessions
        self.session_count = 0

    def request(self, t: float) -> TraceRequest:
        names = [k for k in KINDS if self.spec.mix.get(k, 0) > 0]
        kind = self.rng.choices(names, weights=[self.spec.mix[k] for k in names])[0]
        max_tokens = self._output_tokens()
        if kind == "tenant":
            return self._tenant(t, max_tokens)
        if kind == "session":
            return self._session(t, max_tokens)
        if kind == "docqa":
            return self._docqa(t, max_tokens)
        return self._cold(t, max_tokens)

    def _output_tokens(self) -> int:
        value = self.spec.output_median * math.exp(self.rng.gauss(0.0, self.spec.output_sigma))
        return max(1, min(self.spec.output_max, round(value)))

    def _question(self) -> str:
        return _words(self.text, self.text.randint(*self.spec.question_words)).rstrip(".") + "?"

    def _tenant(self, t: float, max_tokens: int) -> TraceRequest:
        weights = _zipf_weights(self.spec.tenants, self.spec.tenant_zipf)
        tenant = self.rng.choices(range(self.spec.tenants), weights=weights)[0]
        messages = ({"role": "system", "content": self.tenant_prompts[tenant]},
                    {"role": "user", "content": self._question()})
        return TraceRequest(t, "tenant", f"tenant-{tenant}", messages, max_tokens)

    def _session(self, t: float, max_tokens: int) -> TraceRequest:
        slot = self.rng.randrange(len(self.sessions))
        session = self.sessions[slot]
        turn = _words(self.text, self.text.randint(*self.spec.turn_words))
        if session is None or session.words + len(turn.split()) > self.spec.max_prompt_words:
            session = self._new_session()
            self.sessions[slot] = session
        session.messages.append({"role": "user", "content": turn})
        request = TraceRequest(t, "session", session.group, tuple(dict(m) for m in session.messages),
                               max_tokens)
        reply = _words(self.text, max_tokens)
        session.messages.append({"role": "assistant", "content": reply})
        session.words += len(turn.split()) + max_tokens
        session.turns_left -= 1
        if session.turns_left <= 0:
            self.sessions[slot] = None
        return request

    def _new_session(self) -> _Session:
        self.session_count += 1
        system = f"Conversation {self.session_count}. " + _words(self.text, self.spec.session_system_words)
        turns = self.text.randint(*self.spec.session_turns)
        return _Session(f"session-{self.session_count}", [{"role": "system", "content": system}],
                        turns, self.spec.session_system_words)

    def _docqa(self, t: float, max_tokens: int) -> TraceRequest:
        weights = _zipf_weights(self.spec.documents, 0.8)
        doc = self.rng.choices(range(self.spec.documents), weights=weights)[0]
        messages = (
            {"role": "system", "content": "Answer from the document only."},
            {"role": "user", "content": f"Document:\n{self.documents[doc]}\n\nQuestion: {self._question()}"},
        )
        return TraceRequest(t, "docqa", f"doc-{doc}", messages, max_tokens)

    def _cold(self, t: float, max_tokens: int) -> TraceRequest:
        words = self.text.randint(*self.spec.cold_words)
        messages = ({"role": "user", "content": _words(self.text, words)},)
        return TraceRequest(t, "cold", "cold", messages, max_tokens)


def generate(spec: WorkloadSpec) -> Trace:
    """A trace of ``spec.requests`` requests with Poisson arrivals (deterministic in the seed)."""
    generator = _Generator(spec)
    t = 0.0
    requests = []
    for _ in range(spec.requests):
        requests.append(generator.request(round(t, 6)))
        t += generator.rng.expovariate(spec.rate)
    spec_dict = asdict(spec)
    spec_dict["mix"] = dict(spec.mix)
    return Trace(spec_dict, tuple(requests))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workload", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="shared-prefix", choices=sorted(PROFILES))
    parser.add_argument("--requests", type=int, help="override the profile's request count")
    parser.add_argument("--rate", type=float, help="override the profile's arrival rate (req/s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/out/trace.jsonl"))
    args = parser.parse_args(argv)
    spec = replace(PROFILES[args.profile], seed=args.seed)
    if args.requests is not None:
        spec = replace(spec, requests=args.requests)
    if args.rate is not None:
        spec = replace(spec, rate=args.rate)
    trace = generate(spec)
    save_trace(args.out, trace)
    words = sum(len(m["content"].split()) for r in trace.requests for m in r.messages)
    print(f"{args.out}: {len(trace.requests)} requests over {trace.duration:.1f} s, "
          f"{kinds(trace.requests)}, {words / max(len(trace.requests), 1):.0f} prompt words/request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
