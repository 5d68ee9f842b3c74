"""Quota arithmetic, pure: sliding-window rate limits, calendar budget periods, Retry-After.

Requests per minute (RPM) up to :data:`RPM_LOG_MAX` use a *sliding log*: the times of the
requests admitted in the last 60 s, and a request is admitted iff fewer than ``rpm`` of them lie
in ``(now - 60, now]``. It is exact ("N requests in any 60 s"); a refusal's Retry-After is when
the logged time that must leave the window for one more request to fit has left it:
``ceil(t + 60 - now)``, at least 1 s, where ``t`` is the oldest logged time when the log holds
``rpm`` of them (the ``n - rpm``-th oldest of ``n`` if the limit was lowered since). A log holds
at most ``rpm`` times per key, so its memory is bounded by the limit (the "sliding window log";
Figma, "An alternative approach to rate limiting", 2017, keeps it in a Redis sorted set, as here).
A limit changed live across the threshold starts on an empty log or counter: for that minute
the key may be admitted up to its limit once more.

RPM above :data:`RPM_LOG_MAX`, and tokens per minute (TPM) always, use the *sliding window
counter* (Cloudflare, "How we built rate limiting capable of scaling to millions of domains",
2017): two fixed one-minute counters, the current and the previous one, and the estimate

    used = previous * (1 - elapsed / 60) + current

where ``elapsed`` is the seconds since the current minute began. It needs two integers per key
and limit, never lets through the limit twice within seconds at a minute boundary as a fixed
window does, and is exact when traffic is even over the previous minute. It is not a bound on
any 60 s span: after a burst of ``rpm`` requests late in one minute, the next minute admits
``rpm * elapsed / 60`` more as it goes, so a 60 s span straddling the boundary can hold up to
about ``2 * rpm`` (an outside trial: 1,916 admitted in 60 s at rpm = 1,001, a burst at :54.9). But ``used`` is fractional and a request
counts 1: a client that retries when told loses about one request per minute to the rounding
(rpm = 1 admits one request per two minutes, Retry-After up to 120 s; rpm = 2 about 1.05 per
minute, 5 about 4.05, 100 about 99.05, 1000 about 999.2; measured with :func:`decide`). Hence
the threshold ``RPM_LOG_MAX = 1000``: above it the counter's loss is under 0.1%, at or below it a
log holds at most 1000 times per key: in Redis a ZSET of about 120 B a request (118 KB for a key
at a limit of 1000, 5 KB up to 128 requests, the compact listpack encoding), only while the key
has had requests in the last minute; the script costs the same round trip as the counter's.
TPM stays on the counter: its amounts are reservations corrected at settlement, which a log of
times would have to hold per request too; its rounding can cost up to about one request's
reservation a minute, a small share when the limit is many requests' worth.

Admission, all or nothing (the same rules run in Redis as one Lua script, ``quota_store.py``):

* RPM: admitted if fewer than ``rpm`` times are logged in the last 60 s (the sliding log), or,
  above :data:`RPM_LOG_MAX`, if ``used + 1 <= rpm``; the request is counted at once, and an
  admitted request stays counted whatever its outcome (settlement never returns RPM).
* TPM: admitted if ``used + reserve <= tpm``, or if ``used == 0`` (a single request larger than
  the whole limit is still let through an idle window rather than refused forever). ``reserve``
  (:class:`Reservation`) estimates the request's whole total: its prompt tokens plus its output
  (``max_completion_tokens``/``max_tokens``, else the cluster's expected output tokens), counted
  at once; when the answer's usage is known the difference to the real total (input + output
  tokens) is added to the counter of the admission's minute.
* Budget: admitted while ``spent + reserve_cost <= budget`` for the current UTC calendar period
  (``hour``, ``day``, ``week`` from Monday, ``month``), or while nothing is spent or reserved yet
  (one request larger than the whole budget still runs once). ``reserve_cost`` is the
  reservation priced at the dearest cluster of the request's route; it is added to the spend at
  once and corrected to the real cost when the answer's usage is known.

**Overshoot bound.** Because every admitted request holds its estimate until it settles,
concurrency alone cannot push a limit past its value: with N requests in flight, the counters
already hold all N estimates. What a limit can still be exceeded by is (a) one request admitted
into an empty window or period, by its own size beyond the limit, plus (b) the sum, over the
requests admitted while the limit was nearly used, of how far each one's actual usage exceeds
its estimate. For requests that set ``max_tokens`` (output never exceeds it) that excess is only
the prompt's under-estimate (the estimate is body bytes / 4, above the real count for English
text and JSON; dense scripts can exceed it); for requests without it, each may exceed its
reservation by its output beyond the cluster's ``expected_output_tokens``.

Amounts of money are integers of micro-USD (1e-6 USD), so Redis counters stay exact.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import dataclass

from gateway.keys.model import KeyLimits

WINDOW_S = 60
MICRO_USD = 1_000_000
RPM_LOG_MAX = 1000  # RPM limits up to this use the exact sliding log (see the module docstring)


@dataclass(frozen=True, slots=True)
class Counters:
    """The counters one admission reads: previous/current minute of RPM and TPM, period spend;
    for a logged RPM limit, the times logged in the last minute and the one that must leave the
    window before one more request fits (``rpm_pivot``, meaningful when ``rpm_logged >= rpm``)."""

    rpm_prev: float = 0
    rpm_curr: float = 0
    tpm_prev: float = 0
    tpm_curr: float = 0
    spent_micro_usd: float = 0
    rpm_logged: int = 0
    rpm_pivot: float = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Admission result. ``limit`` names the limit that refused (``rpm``, ``tpm``, ``budget``)."""

    allowed: bool
    limit: str | None = None
    retry_after_s: int = 0


ALLOWED = Verdict(True)


def window_start(now: float, window_s: int = WINDOW_S) -> int:
    """Start of the fixed window holding ``now`` (Unix seconds)."""
    return int(now // window_s) * window_s


def elapsed_fraction(now: float, window_s: int = WINDOW_S) -> float:
    """How far into its window ``now`` is, in [0, 1)."""
    return (now - window_start(now, window_s)) / window_s


def sliding_used(prev: float, curr: float, fraction: float) -> float:
    """The sliding-window estimate of what was used in the last window."""
    return prev * (1.0 - fraction) + curr


def wait_until_fits(prev: float, curr: float, cost: float, limit: float, fraction: float, window_s: int = WINDOW_S) -> int:
    """Whole seconds until ``cost`` more fits under ``limit`` if nothing else arrives (>= 1).

    While the current window lasts, only the previous window's share decays; once it ends the
    current count becomes the previous one and decays in turn.
    """
    room = limit - cost - curr
    if prev > 0 and room >= 0:
        needed = 1.0 - room / prev  # the fraction at which prev * (1 - f) <= room
        return _whole_seconds((needed - fraction) * window_s)
    if room >= 0:
        return 1
    remaining = (1.0 - fraction) * window_s  # until this window ends
    room_next = limit - cost
    if curr <= 0 or room_next >= curr:
        return _whole_seconds(remaining)
    needed = 1.0 - max(room_next, 0.0) / curr
    return _whole_seconds(remaining + needed * window_s)


def log_wait(pivot: float, now: float, window_s: int = WINDOW_S) -> int:
    """Whole seconds until the logged time ``pivot`` leaves the window ``(now - 60, now]`` (>= 1)."""
    return max(1, math.ceil(pivot + window_s - now))


def _whole_seconds(seconds: float) -> int:
    """Seconds rounded up (ignoring float noise below a microsecond), at least 1."""
    return max(1, math.ceil(seconds - 1e-6))


def period_bounds(now: float, period: str) -> tuple[int, int]:
    """The UTC calendar period (``hour``, ``day``, ``week``, ``month``) holding ``now``: (start, end).

    Unix seconds. Every such period starts on a whole UTC hour, so the answer depends only on the
    hour holding ``now`` and is memoized per (hour, period). Raises ValueError for another period.
    """
    return _period_bounds(int(now // 3600), period)


@functools.lru_cache(maxsize=64)
def _period_bounds(hour: int, period: str) -> tuple[int, int]:
    moment = dt.datetime.fromtimestamp(hour * 3600, dt.timezone.utc)
    if period == "hour":
        start = moment.replace(minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(hours=1)
    elif period == "day":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(days=1)
    elif period == "week":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=moment.weekday())
        end = start + dt.timedelta(days=7)
    elif period == "month":
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    else:
        raise ValueError(f"unknown budget period {period!r}")
    return int(start.timestamp()), int(end.timestamp())


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one request holds against its key's limits until it settles: ``tokens`` (TPM) and
    ``micro_usd`` (budget)."""

    tokens: int
    micro_usd: int = 0


def estimate_prompt_tokens(body_bytes: int) -> int:
    """A cheap prompt-size estimate for TPM reservations: 4 bytes per token, at least 1."""
    return max(1, body_bytes // 4)


def decide(
    limits: KeyLimits, counters: Counters, now: float, reserve: int, reserve_cost: int = 0, *, rpm_log_max: int = RPM_LOG_MAX
) -> Verdict:
    """Admit or refuse one request; pure mirror of the Lua script in ``quota_store.py``.

    ``reserve``: tokens, ``reserve_cost``: micro-USD the request would hold (see the module
    docstring); ``rpm_log_max``: the largest RPM limit kept as a sliding log.
    """
    fraction = elapsed_fraction(now)
    rpm = limits.rpm
    if rpm is not None and rpm <= rpm_log_max:
        if counters.rpm_logged >= rpm:
            return Verdict(False, "rpm", log_wait(counters.rpm_pivot, now))
    elif rpm is not None:
        used = sliding_used(counters.rpm_prev, counters.rpm_curr, fraction)
        if used + 1 > rpm:
            wait = wait_until_fits(counters.rpm_prev, counters.rpm_curr, 1, rpm, fraction)
            return Verdict(False, "rpm", wait)
    if limits.tpm is not None:
        used = sliding_used(counters.tpm_prev, counters.tpm_curr, fraction)
        if used > 0 and used + reserve > limits.tpm:
            cost = min(reserve, limits.tpm)
            wait = wait_until_fits(counters.tpm_prev, counters.tpm_curr, cost, limits.tpm, fraction)
            return Verdict(False, "tpm", wait)
    spent = counters.spent_micro_usd
    if limits.budget_usd is not None and budget_exhausted(spent, reserve_cost, limits.budget_usd * MICRO_USD):
        _, end = period_bounds(now, limits.budget_period)
        return Verdict(False, "budget", max(1, math.ceil(end - now)))
    return ALLOWED


def budget_exhausted(spent: float, reserve_cost: float, budget: float) -> bool:
    """Whether a request reserving ``reserve_cost`` is refused with ``spent`` of ``budget`` used (micro-USD)."""
    return spent >= budget or (spent > 0 and spent + reserve_cost > budget)
