"""The traffic of ``bench/spikes.py``: an open-loop ramp of two tenants and two classes, and its table.

Traffic: Poisson arrivals per load step at ``load * capacity`` requests per second in total,
split over two tenants of equal weight (``loud`` sends 5x ``quiet``'s rate) and, within each
tenant, half ``interactive`` and half ``batch`` (``X-Priority``). Every request is a short
streamed chat completion (``stream_options.include_usage``); the client records its status,
TTFT (first content token), the cluster that served it (``x-kvgate-cluster``), usage, and for a
shed its ``Retry-After``. Requests belong to the step they arrived in.

Columns per (row, load step), :func:`summarise`:

* ``goodput``: share of the step's requests answered with TTFT within their class's SLO;
* TTFT p50/p99 in ms of answered requests, per class and per tenant;
* ``spilled`` / ``shed`` / ``lost``: shares served by the managed cluster, refused with 429/503,
  and failed otherwise (transport errors, other statuses: should be 0);
* ``retry_vs_drain``: median over sheds of ``Retry-After`` (whole seconds) over the actual drain
  time (the longest TTFT of a same-class request answered locally that was sent in the 0.5 s
  before the shed: it waited behind the same backlog); ``retry_ms_vs_drain``: the same for the
  ``retry-after-ms`` header (the precise predicted drain the openai SDK reads first); within
  0.5..2 is the goal;
* ``usd_per_1k``: cost of 1,000 answered requests at the clusters' prices (usage tokens);
* ``quiet_share``: the quiet tenant's requests answered by the local cluster within their SLO,
  over its fair share of the local capacity during the step (``capacity * step_s`` requests,
  given to the classes in priority order and within a class water-filled over the tenants'
  actual request counts, equal weights: the max-min allocation admission aims at; capped at 1),
  and ``jain``: Jain's fairness index over the two tenants' ``served / fair share``
  (R. Jain, D. Chiu, W. Hawe, DEC-TR-301, 1984; 1 = perfectly fair); ``quiet_of_delivered``:
  the same share, but of what the local cluster actually delivered within SLO in the step
  (fairness of the split, apart from how much capacity admission left unused).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
import orjson

from bench.trace import percentile

TENANTS = {"loud": 5.0, "quiet": 1.0}  # relative rates
CLASSES = ("interactive", "batch")


@dataclass(frozen=True)
class Traffic:
    """What the ramp sends (times in seconds, rates in requests per second)."""

    capacity_rps: float
    loads: tuple[float, ...]
    step_s: float
    max_tokens: int
    slo_s: dict[str, float]
    prices: dict[str, tuple[float, float]]  # cluster -> (USD per 1M input, per 1M output)
    keys: dict[str, str]  # tenant -> bearer secret
    model: str = "sim-model"
    seed: int = 0


@dataclass
class Sample:
    """One request as the client saw it."""

    step: int
    tenant: str
    cls: str
    status: int = 0
    ttft_s: float | None = None
    cluster: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retry_after_s: float | None = None
    retry_after_ms: float | None = None
    error: str | None = None
    sent_at: float = 0.0


def arrivals(traffic: Traffic) -> list[tuple[float, int, str, str]]:
    """``(time_s, step, tenant, class)`` of every request of the ramp, in time order (seeded)."""
    rng = random.Random(traffic.seed)
    total = sum(TENANTS.values())
    out = []
    for step, load in enumerate(traffic.loads):
        begin = step * traffic.step_s
        for tenant, share in TENANTS.items():
            for cls in CLASSES:
                rate = load * traffic.capacity_rps * share / total / len(CLASSES)
                t = begin + rng.expovariate(rate)
                while t < begin + traffic.step_s:
                    out.append((t, step, tenant, cls))
                    t += rng.expovariate(rate)
    return sorted(out)


async def _one(session: aiohttp.ClientSession, url: str, traffic: Traffic, sample: Sample, index: int) -> None:
    body = {"model": traffic.model, "stream": True, "max_tokens": traffic.max_tokens,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"request {index} of {sample.tenant}: say something"}]}
    headers = {"Authorization": f"Bearer {traffic.keys[sample.tenant]}", "X-Priority": sample.cls,
               "Content-Type": "application/json"}
    sent = sample.sent_at = time.monotonic()
    try:
        async with session.post(url, data=orjson.dumps(body), headers=headers) as reply:
            sample.status = reply.status
            sample.cluster = reply.headers.get("x-kvgate-cluster")
            if reply.status != 200:
                retry = reply.headers.get("Retry-After")
                sample.retry_after_s = float(retry) if retry else None
                retry_ms = reply.headers.get("retry-after-ms")
                sample.retry_after_ms = float(retry_ms) if retry_ms else None
                await reply.read()
                return
            async for line in reply.content:
                if sample.ttft_s is None and b'"content":"' in line and b'"content":""' not in line:
                    sample.ttft_s = time.monotonic() - sent
                elif line.startswith(b"data: {") and b'"usage":{' in line:
                    usage = orjson.loads(line[6:]).get("usage") or {}
                    sample.prompt_tokens = usage.get("prompt_tokens", 0)
                    sample.completion_tokens = usage.get("completion_tokens", 0)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
        sample.error = type(error).__name__


async def ramp(origin: str, traffic: Traffic) -> list[Sample]:
    """Send the ramp open-loop through ``origin`` (the gateway) and wait for every answer."""
    url = f"{origin}/v1/chat/completions"
    plan = arrivals(traffic)
    samples = [Sample(step, tenant, cls) for _, step, tenant, cls in plan]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        tasks = []
        for index, ((at, *_), sample) in enumerate(zip(plan, samples, strict=True)):
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(session, url, traffic, sample, index)))
        await asyncio.gather(*tasks)
    return samples


def fair_shares(demands: dict[str, float], capacity: float) -> dict[str, float]:
    """Max-min fair (water-filling) shares of ``capacity`` for ``demands`` (equal weights)."""
    shares, left, open_ = {}, capacity, dict(demands)
    while open_:
        level = left / len(open_)
        small = {k: d for k, d in open_.items() if d <= level}
        if not small:
            shares.update({k: level for k in open_})
            break
        for k, d in small.items():
            shares[k] = d
            left -= d
            del open_[k]
    return shares


def class_fair_shares(samples: Sequence[Sample], capacity: float) -> dict[str, float]:
    """Each tenant's fair share of ``capacity`` requests: classes in priority order, max-min within each."""
    fair = dict.fromkeys(TENANTS, 0.0)
    for cls in CLASSES:
        demand = {t: float(sum(1 for s in samples if s.tenant == t and s.cls == cls)) for t in TENANTS}
        shares = fair_shares(demand, capacity)
        capacity = max(0.0, capacity - sum(shares.values()))
        for tenant, share in shares.items():
            fair[tenant] += share
    return fair


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values`` (1 = equal)."""
    square = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * square) if square else 1.0


def _ms(values: list[float], q: float) -> float | None:
    return round(percentile(values, q) * 1000) if values else None


def summarise(row: str, samples: list[Sample], traffic: Traffic, local: str, managed: str) -> list[dict]:
    """One dict of columns per load step (see the module docstring)."""
    out = []
    for step, load in enumerate(traffic.loads):
        mine = [s for s in samples if s.step == step]
        answered = [s for s in mine if s.status == 200 and s.ttft_s is not None]
        columns: dict = {"row": row, "load": load, "requests": len(mine)}
        good = [s for s in answered if s.ttft_s <= traffic.slo_s[s.cls]]
        columns["goodput"] = round(len(good) / len(mine), 3) if mine else None
        for group in (*CLASSES, *TENANTS):
            ttfts = [s.ttft_s for s in answered if group in (s.cls, s.tenant)]
            columns[f"{group}_p50_ms"] = _ms(ttfts, 0.5)
            columns[f"{group}_p99_ms"] = _ms(ttfts, 0.99)
        interactive = [s for s in mine if s.cls == "interactive"]
        columns["interactive_in_slo"] = round(
            sum(1 for s in interactive if s in good) / len(interactive), 3) if interactive else None
        columns["spilled"] = round(sum(1 for s in answered if s.cluster == managed) / max(1, len(mine)), 3)
        columns["shed"] = round(sum(1 for s in mine if s.status in (429, 503)) / max(1, len(mine)), 3)
        columns["lost"] = sum(1 for s in mine if s.error or s.status not in (200, 429, 503)
                              or (s.status == 200 and s.ttft_s is None))
        cost = sum(_cost(s, traffic) for s in answered)
        columns["usd_per_1k"] = round(1000 * cost / len(answered), 4) if answered else None
        fair = class_fair_shares(mine, traffic.capacity_rps * traffic.step_s)
        served = {t: sum(1 for s in good if s.tenant == t and s.cluster == local) for t in TENANTS}
        ratios = [min(served[t] / fair[t], 1.0) if fair[t] else 1.0 for t in TENANTS]
        columns["quiet_share"] = round(min(served["quiet"] / fair["quiet"], 1.0), 3) if fair["quiet"] else None
        columns["jain"] = round(jain(ratios), 3)
        delivered = class_fair_shares(mine, float(sum(served.values())))  # the split of what local delivered
        columns["quiet_of_delivered"] = (
            round(min(served["quiet"] / delivered["quiet"], 1.0), 3) if delivered["quiet"] else None
        )
        sheds = [s for s in mine if s.retry_after_s is not None]
        columns["retry_after_p50_s"] = percentile([s.retry_after_s for s in sheds], 0.5) if sheds else None
        locals_ = [s for s in answered if s.cluster == local]
        columns["retry_vs_drain"] = _retry_vs_drain(sheds, locals_, lambda s: s.retry_after_s)
        columns["retry_ms_vs_drain"] = _retry_vs_drain(
            sheds, locals_, lambda s: s.retry_after_ms / 1000.0 if s.retry_after_ms else None)
        out.append(columns)
    return out


def _retry_vs_drain(sheds: list[Sample], local: list[Sample], told: Callable[[Sample], float | None]) -> float | None:
    """Median of ``told(shed) / drain`` over sheds (``told``: the header's delay, s); drain: the longest TTFT of a request of the same
    class answered locally that was sent in the 0.5 s before the shed (it waited behind the same
    backlog: the time that backlog took to drain)."""
    ratios = []
    for shed in sheds:
        near = [s.ttft_s for s in local if s.cls == shed.cls and shed.sent_at - 0.5 <= s.sent_at <= shed.sent_at]
        delay = told(shed)
        if near and delay:
            ratios.append(delay / max(max(near), 1e-3))  # type: ignore[type-var]
    return round(percentile(ratios, 0.5), 2) if ratios else None


def _cost(sample: Sample, traffic: Traffic) -> float:
    price_in, price_out = traffic.prices.get(sample.cluster or "", (0.0, 0.0))
    return (sample.prompt_tokens * price_in + sample.completion_tokens * price_out) / 1e6


COLUMNS = ("row", "load", "requests", "goodput", "interactive_in_slo", "interactive_p50_ms", "interactive_p99_ms",
           "batch_p50_ms", "batch_p99_ms", "loud_p50_ms", "loud_p99_ms", "quiet_p50_ms", "quiet_p99_ms",
           "spilled", "shed", "lost", "retry_vs_drain", "retry_ms_vs_drain", "usd_per_1k", "quiet_share", "quiet_of_delivered", "jain")


def format_table(rows: list[dict]) -> str:
    """A fixed-width table of :data:`COLUMNS`; a row that could not run prints its note."""
    lines = ["  ".join(f"{c:>{max(len(c), 6)}}" for c in COLUMNS)]
    for row in rows:
        if "note" in row:
            lines.append(f"{row['row']:>6}  {row['note']}")
            continue
        lines.append("  ".join(f"{_cell(row.get(c)):>{max(len(c), 6)}}" for c in COLUMNS))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def to_json(rows: list[dict]) -> str:
    return "\n".join(orjson.dumps(row).decode() for row in rows)

