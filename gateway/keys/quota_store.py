"""Quota counters and usage records: the :class:`QuotaStore` seam, in memory and in Redis.

Both implementations apply the rules of ``gateway/keys/limits.py``. In Redis one admission is
one Lua script (``EVALSHA``), so concurrent requests on any number of replicas are admitted
atomically: the counters are read, checked and incremented (the request counted, its token and
cost reservations added) as one step, all or nothing: a request refused by one limit counts
against none. Settlement after an answer is one pipeline of ``INCRBY``/``HINCRBY`` and
``EXPIRE`` adding the actual minus the reserved amounts to the counters of the admission's
minute and budget period (RPM is never settled: an admitted request stays counted).

Redis keys (``P`` = ``state.key_prefix``; the ``{id}`` hash tag keeps one key's counters in one
Redis Cluster slot):
    ``P q:{id}:rpm:log``                       RPM sliding log (``rpm <= RPM_LOG_MAX``): a ZSET of
                                               the admitted requests, score = admission time (Unix
                                               s), member unique per request; trimmed to the last
                                               minute by each admission, expires 65 s after the last.
    ``P q:{id}:rpm:W`` / ``P q:{id}:tpm:W``   requests (above ``RPM_LOG_MAX``) / tokens in the
                                               minute starting at Unix W; expire after two minutes.
    ``P q:{id}:spend:S``                       micro-USD spent in the budget period starting at S;
                                               expires an hour after the period ends.
    ``P u:{id}:YYYY-MM-DD``                    usage hash of one UTC day, fields
                                               ``MODEL|CLUSTER|FIELD`` (FIELD in :data:`USAGE_FIELDS`);
                                               kept ``quotas.usage_retention_days``.

Both stores take every time from the caller's ``now`` (the gateway's injected wall clock), never
from Redis ``TIME``, so they give the same answers to the same calls (the contract suite runs
both); replicas' clocks are assumed synchronized (NTP), as for the minute counters. The log's
5 s of TTL beyond the minute cover replicas whose clocks differ by up to that much.

Errors: Redis failures surface as :class:`~gateway.errors.StateStoreError` (503); the caller
decides to fail open or closed (``quotas.on_store_error``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import itertools
import secrets
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.errors import StateStoreError
from gateway.keys.limits import RPM_LOG_MAX, WINDOW_S, Counters, Verdict, decide, period_bounds, window_start
from gateway.keys.model import KeyLimits

USAGE_FIELDS = ("requests", "errors", "input_tokens", "cached_tokens", "output_tokens", "cost_micro_usd")
_WINDOW_TTL_S = 2 * WINDOW_S + 5
_LOG_TTL_MS = (WINDOW_S + 5) * 1000


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class Settlement:
    """What one finished request adds to its key's counters and usage (integers)."""

    key_id: str
    limits: KeyLimits
    now: float
    reserved: int
    model: str
    cluster: str
    ok: bool
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    cost_micro_usd: int = 0
    reserved_micro_usd: int = 0
    admitted_at: float | None = None

    @property
    def counted_at(self) -> float:
        """When the reservations were counted: corrections go to that minute and period."""
        return self.now if self.admitted_at is None else self.admitted_at

    def token_increments(self, prefix: str) -> dict[str, int]:
        """TPM counter -> increment: the reservation returned to the admission's minute, the
        actual total counted in the minute the request ended (one counter when they agree)."""
        base = f"{prefix}q:{{{self.key_id}}}:tpm:"
        ended, admitted = base + str(window_start(self.now)), base + str(window_start(self.counted_at))
        actual = self.input_tokens + self.output_tokens
        if ended == admitted:
            return {ended: actual - self.reserved} if actual != self.reserved else {}
        return {name: value for name, value in ((admitted, -self.reserved), (ended, actual)) if value}

    @property
    def cost_delta(self) -> int:
        return self.cost_micro_usd - self.reserved_micro_usd

    def usage_increments(self) -> dict[str, int]:
        values = (1, 0 if self.ok else 1, self.input_tokens, self.cached_tokens, self.output_tokens, self.cost_micro_usd)
        return {name: value for name, value in zip(USAGE_FIELDS, values, strict=True) if value}


def day_of(now: float) -> str:
    """The UTC day holding ``now`` (Unix seconds) as ``YYYY-MM-DD`` (memoized per day)."""
    return _day(int(now // 86400))


@functools.lru_cache(maxsize=16)
def _day(day: int) -> str:
    return dt.datetime.fromtimestamp(day * 86400, dt.timezone.utc).strftime("%Y-%m-%d")


def parse_usage(day: str, fields: dict[str, int]) -> list[dict[str, Any]]:
    """Usage rows of one day from ``MODEL|CLUSTER|FIELD -> count``, sorted by model and cluster."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for name, value in fields.items():
        parts = name.rsplit("|", 2)
        if len(parts) != 3 or parts[2] not in USAGE_FIELDS:
            continue
        model, cluster, field = parts
        empty = {"day": day, "model": model, "cluster": cluster, **dict.fromkeys(USAGE_FIELDS, 0)}
        row = rows.setdefault((model, cluster), empty)
        row[field] = int(value)
    for row in rows.values():
        row["cost_usd"] = row["cost_micro_usd"] / 1_000_000
    return [rows[key] for key in sorted(rows)]


class QuotaStore(Protocol):
    async def admit(self, key_id: str, limits: KeyLimits, now: float, reserve: int, reserve_cost: int = 0) -> Verdict:
        """Check every limit of ``limits`` and, if all pass, count the request and add its
        reservations (``reserve`` tokens, ``reserve_cost`` micro-USD). Raises StateStoreError."""

    async def settle(self, settlements: Sequence[Settlement]) -> None:
        """Add finished requests' tokens, spend and usage. Raises StateStoreError."""

    async def usage(self, key_id: str, days: Sequence[str]) -> list[dict[str, Any]]:
        """Usage rows of ``key_id`` on the given UTC days (``YYYY-MM-DD``). Raises StateStoreError."""

    async def spent(self, key_id: str, limits: KeyLimits, now: float) -> int:
        """Micro-USD spent in the current budget period."""


def _names(prefix: str, key_id: str, limits: KeyLimits, now: float) -> list[str]:
    """Counter keys: rpm prev/curr, tpm prev/curr, spend, rpm log."""
    base = f"{prefix}q:{{{key_id}}}"
    curr = window_start(now)
    prev = curr - WINDOW_S
    spend_start, _ = period_bounds(now, limits.budget_period)
    return [
        f"{base}:rpm:{prev}", f"{base}:rpm:{curr}", f"{base}:tpm:{prev}", f"{base}:tpm:{curr}", f"{base}:spend:{spend_start}",
        f"{base}:rpm:log",
    ]


class MemoryQuotaStore:
    """Counters in this process: exact for one replica; ``now`` drives expiry (no timers).

    A logged RPM limit keeps a deque of admission times per key, in ascending order (a time
    earlier than the newest, from a caller's clock stepping back, is inserted in order, as a
    Redis ZSET would sort it), trimmed to the last minute on each admission.
    """

    def __init__(self, rpm_log_max: int = RPM_LOG_MAX) -> None:
        self._counters: dict[str, float] = defaultdict(float)
        self._logs: dict[str, deque[float]] = {}
        self._usage: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._swept = 0
        self._log_max = rpm_log_max

    def _forget_before(self, now: float) -> None:
        """Drop minute counters older than the previous minute and logs idle for a minute (once per minute)."""
        horizon = window_start(now) - WINDOW_S
        if horizon <= self._swept:
            return
        self._swept = horizon
        for name in [n for n in self._counters if (":rpm:" in n or ":tpm:" in n) and int(n.rsplit(":", 1)[1]) < horizon]:
            del self._counters[name]
        for name in [n for n, times in self._logs.items() if not times or times[-1] <= now - WINDOW_S]:
            del self._logs[name]

    def _logged(self, key_id: str, now: float) -> deque[float]:
        """The key's RPM log trimmed to ``(now - 60, ...]`` (what ZREMRANGEBYSCORE leaves in Redis)."""
        times = self._logs.get(key_id)
        if times is None:
            times = self._logs[key_id] = deque()
        horizon = now - WINDOW_S
        while times and times[0] <= horizon:
            times.popleft()
        return times

    async def admit(self, key_id: str, limits: KeyLimits, now: float, reserve: int, reserve_cost: int = 0) -> Verdict:
        # no await between the read and the writes: atomic on the event loop
        self._forget_before(now)
        names = _names("", key_id, limits, now)
        get = self._counters.get
        rpm, times = limits.rpm, None
        if rpm is not None and rpm <= self._log_max:
            times = self._logged(key_id, now)
            count = len(times)
            pivot = times[count - rpm] if count >= rpm else 0.0
            counters = Counters(0.0, 0.0, get(names[2], 0.0), get(names[3], 0.0), get(names[4], 0.0), count, pivot)
        else:
            counters = Counters(get(names[0], 0.0), get(names[1], 0.0), get(names[2], 0.0), get(names[3], 0.0), get(names[4], 0.0))
        verdict = decide(limits, counters, now, reserve, reserve_cost, rpm_log_max=self._log_max)
        if verdict.allowed:
            if times is not None:
                if not times or now >= times[-1]:
                    times.append(now)
                else:
                    bisect.insort(times, now)
            elif rpm is not None:
                self._counters[names[1]] += 1
            if limits.tpm is not None:
                self._counters[names[3]] += reserve
            if limits.budget_usd is not None:
                self._counters[names[4]] += reserve_cost
        return verdict

    async def settle(self, settlements: Sequence[Settlement]) -> None:
        for item in settlements:
            if item.limits.tpm is not None or item.limits.budget_usd is not None:
                if item.limits.tpm is not None:
                    for name, value in item.token_increments("").items():
                        self._counters[name] += value
                if item.limits.budget_usd is not None:
                    self._counters[_names("", item.key_id, item.limits, item.counted_at)[4]] += item.cost_delta
            usage = self._usage[(item.key_id, day_of(item.now))]
            for field, value in item.usage_increments().items():
                usage[f"{item.model}|{item.cluster}|{field}"] += value

    async def usage(self, key_id: str, days: Sequence[str]) -> list[dict[str, Any]]:
        rows = []
        for day in days:
            rows.extend(parse_usage(day, dict(self._usage.get((key_id, day), {}))))
        return rows

    async def spent(self, key_id: str, limits: KeyLimits, now: float) -> int:
        return int(self._counters.get(_names("", key_id, limits, now)[4], 0))


# KEYS: rpm prev, rpm curr, tpm prev, tpm curr, spend, rpm log.
# ARGV: elapsed fraction, rpm limit, tpm limit, reserve, budget micro-USD (-1 = none), window TTL,
# reserved micro-USD, Unix time the spend counter expires at, 1 if the rpm limit is logged (else
# 0), now - 60 (log entries at or before it are dropped), now (the new entry's score), the new
# entry's member, the log's TTL in ms. Times go as Python's repr of the float: exact, so the
# ZSET's scores are the very doubles the in-memory store keeps.
_ADMIT = """
local f = tonumber(ARGV[1])
local rpm, tpm, reserve = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local budget, ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local cost, spend_until = tonumber(ARGV[7]), tonumber(ARGV[8])
local logged = rpm >= 0 and ARGV[9] == '1'
local function num(k) return tonumber(redis.call('GET', k) or '0') end
local rp, rc, n, pivot = 0, 0, 0, '0'
local tp, tc, sp = num(KEYS[3]), num(KEYS[4]), num(KEYS[5])
local ok = 1
if logged then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', ARGV[10])
  n = redis.call('ZCARD', KEYS[6])
  if n >= rpm then
    ok = 0
    pivot = redis.call('ZRANGE', KEYS[6], n - rpm, n - rpm, 'WITHSCORES')[2]
  end
elseif rpm >= 0 then
  rp, rc = num(KEYS[1]), num(KEYS[2])
  if rp * (1 - f) + rc + 1 > rpm then ok = 0 end
end
if ok == 1 and tpm >= 0 then
  local used = tp * (1 - f) + tc
  if used > 0 and used + reserve > tpm then ok = 0 end
end
if ok == 1 and budget >= 0 and (sp >= budget or (sp > 0 and sp + cost > budget)) then ok = 0 end
if ok == 1 then
  if logged then
    redis.call('ZADD', KEYS[6], ARGV[11], ARGV[12]); redis.call('PEXPIRE', KEYS[6], ARGV[13])
  elseif rpm >= 0 then
    redis.call('INCR', KEYS[2]); redis.call('EXPIRE', KEYS[2], ttl)
  end
  if tpm >= 0 then redis.call('INCRBY', KEYS[4], reserve); redis.call('EXPIRE', KEYS[4], ttl) end
  if budget >= 0 and cost > 0 then redis.call('INCRBY', KEYS[5], cost); redis.call('EXPIREAT', KEYS[5], spend_until) end
end
return {ok, tostring(rp), tostring(rc), tostring(tp), tostring(tc), tostring(sp), n, pivot}
"""


def _limit(value: float | None, scale: float = 1) -> float:
    return -1 if value is None else value * scale


class RedisQuotaStore:
    """Counters in Redis shared by every replica (see the module docstring for the keys)."""

    def __init__(self, client: aioredis.Redis, prefix: str, retention_days: int, rpm_log_max: int = RPM_LOG_MAX) -> None:
        self._redis = client
        self._prefix = prefix
        self._retention_s = retention_days * 86400
        self._admit = client.register_script(_ADMIT)
        self._log_max = rpm_log_max
        # log members: this store's random id and a sequence number, unique across replicas
        self._member_id = secrets.token_hex(6) + ":"
        self._sequence = itertools.count()

    async def admit(self, key_id: str, limits: KeyLimits, now: float, reserve: int, reserve_cost: int = 0) -> Verdict:
        names = _names(self._prefix, key_id, limits, now)
        fraction = (now - window_start(now)) / WINDOW_S
        _, period_end = period_bounds(now, limits.budget_period)
        logged = limits.rpm is not None and limits.rpm <= self._log_max
        args = [
            fraction, _limit(limits.rpm), _limit(limits.tpm), reserve, _limit(limits.budget_usd, 1_000_000), _WINDOW_TTL_S,
            reserve_cost, period_end + 3600, 1 if logged else 0, now - WINDOW_S, now,
            f"{self._member_id}{next(self._sequence)}" if logged else "", _LOG_TTL_MS,
        ]
        try:
            reply = await self._admit(keys=names, args=args)
        except RedisError as error:
            raise StateStoreError(f"quota check failed: {type(error).__name__}") from None
        if int(reply[0]) == 1:
            return Verdict(True)
        counters = Counters(*(float(value) for value in reply[1:6]), int(reply[6]), float(reply[7]))
        verdict = decide(limits, counters, now, reserve, reserve_cost, rpm_log_max=self._log_max)
        return verdict if not verdict.allowed else Verdict(False, "rpm", 1)

    async def settle(self, settlements: Sequence[Settlement]) -> None:
        """One pipeline for the batch, increments summed per counter and usage field first (a
        batch of one key's requests costs a few commands, not a few per request)."""
        counters: dict[str, int] = defaultdict(int)
        expire_at: dict[str, int | None] = {}  # counter -> Unix expiry (None: _WINDOW_TTL_S from now)
        usage: dict[str, defaultdict[str, int]] = {}
        for item in settlements:
            if item.limits.tpm is not None:
                for name, value in item.token_increments(self._prefix).items():
                    counters[name] += value
                    expire_at[name] = None
            cost = item.cost_delta
            if item.limits.budget_usd is not None and cost:
                name = _names(self._prefix, item.key_id, item.limits, item.counted_at)[4]
                counters[name] += cost
                expire_at[name] = period_bounds(item.counted_at, item.limits.budget_period)[1] + 3600
            fields = usage.setdefault(f"{self._prefix}u:{{{item.key_id}}}:{day_of(item.now)}", defaultdict(int))
            for field, value in item.usage_increments().items():
                fields[f"{item.model}|{item.cluster}|{field}"] += value
        pipe = self._redis.pipeline(transaction=False)
        for name, value in counters.items():
            if value:
                pipe.incrby(name, value)
            at = expire_at[name]
            if at is None:
                pipe.expire(name, _WINDOW_TTL_S)
            else:
                pipe.expireat(name, at)
        for usage_key, fields in usage.items():
            for field, value in fields.items():
                pipe.hincrby(usage_key, field, value)
            pipe.expire(usage_key, self._retention_s)
        try:
            await pipe.execute()
        except RedisError as error:
            raise StateStoreError(f"usage settlement failed: {type(error).__name__}") from None

    async def usage(self, key_id: str, days: Sequence[str]) -> list[dict[str, Any]]:
        pipe = self._redis.pipeline(transaction=False)
        for day in days:
            pipe.hgetall(f"{self._prefix}u:{{{key_id}}}:{day}")
        try:
            replies = await pipe.execute()
        except RedisError as error:
            raise StateStoreError(f"usage read failed: {type(error).__name__}") from None
        rows = []
        for day, fields in zip(days, replies, strict=True):
            rows.extend(parse_usage(day, {_text(name): int(value) for name, value in fields.items()}))
        return rows

    async def spent(self, key_id: str, limits: KeyLimits, now: float) -> int:
        try:
            value = await self._redis.get(_names(self._prefix, key_id, limits, now)[4])
        except RedisError as error:
            raise StateStoreError(f"spend read failed: {type(error).__name__}") from None
        return int(value or 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
