"""Quota arithmetic, table-driven: sliding windows and logs, Retry-After, calendar periods, admission."""

from __future__ import annotations

import datetime as dt

import pytest

from gateway.keys.limits import (
    Counters,
    Verdict,
    decide,
    elapsed_fraction,
    estimate_prompt_tokens,
    log_wait,
    period_bounds,
    sliding_used,
    wait_until_fits,
)
from gateway.keys.model import KeyLimits

# 2027-01-13 (a Wednesday) 12:00:10 UTC: 10 s into a minute.
NOW = dt.datetime(2027, 1, 13, 12, 0, 10, tzinfo=dt.timezone.utc).timestamp()


def _at(*fields: int) -> int:
    return int(dt.datetime(*fields, tzinfo=dt.timezone.utc).timestamp())


@pytest.mark.parametrize(
    ("prev", "curr", "fraction", "used"),
    [(0, 0, 0.0, 0), (10, 0, 0.0, 10), (10, 0, 0.5, 5), (10, 4, 0.25, 11.5), (0, 7, 0.9, 7)],
)
def test_sliding_used(prev: float, curr: float, fraction: float, used: float) -> None:
    assert sliding_used(prev, curr, fraction) == pytest.approx(used)


def test_elapsed_fraction() -> None:
    assert elapsed_fraction(NOW) == pytest.approx(10 / 60)


@pytest.mark.parametrize(
    ("prev", "curr", "cost", "limit", "fraction", "wait"),
    [
        (0, 3, 1, 3, 10 / 60, 70),  # full now: 50 s to the next minute, then prev=3 must decay by 1/3 (20 s)
        (3, 0, 1, 3, 0.0, 20),  # prev must decay to 2: f >= 1/3 of the minute
        (3, 0, 1, 3, 0.5, 1),  # already fits (just): at least 1 s
        (6, 2, 1, 6, 0.0, 30),  # room 3 = 6 * (1 - f) -> f = 1/2
        (0, 10, 20, 15, 0.0, 120),  # more than the limit: wait until the window is empty (two minutes)
    ],
)
def test_wait_until_fits(prev: float, curr: float, cost: float, limit: float, fraction: float, wait: int) -> None:
    assert wait_until_fits(prev, curr, cost, limit, fraction) == wait


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("hour", _at(2027, 1, 13, 12), _at(2027, 1, 13, 13)),
        ("day", _at(2027, 1, 13), _at(2027, 1, 14)),
        ("week", _at(2027, 1, 11), _at(2027, 1, 18)),
        ("month", _at(2027, 1, 1), _at(2027, 2, 1)),
    ],
)
def test_period_bounds(period: str, start: int, end: int) -> None:
    assert period_bounds(NOW, period) == (start, end)


def test_december_rolls_into_the_next_year() -> None:
    assert period_bounds(_at(2027, 12, 31, 23), "month") == (_at(2027, 12, 1), _at(2028, 1, 1))


def test_unknown_period_is_an_error() -> None:
    with pytest.raises(ValueError):
        period_bounds(NOW, "fortnight")


@pytest.mark.parametrize(("size", "tokens"), [(0, 1), (3, 1), (400, 100), (401, 100)])
def test_prompt_estimate(size: int, tokens: int) -> None:
    assert estimate_prompt_tokens(size) == tokens


DAY_END = _at(2027, 1, 14) - NOW

DECISIONS = [
    # (id, limits, counters, reserve, verdict); RPM up to RPM_LOG_MAX: the sliding log
    ("no limits", KeyLimits(), Counters(rpm_curr=10**9, rpm_logged=10**9), 0, Verdict(True)),
    ("rpm log room", KeyLimits(rpm=3), Counters(rpm_logged=2), 0, Verdict(True)),
    ("rpm log full", KeyLimits(rpm=3), Counters(rpm_logged=3, rpm_pivot=NOW - 15), 0, Verdict(False, "rpm", 45)),
    ("rpm log full, the oldest just now", KeyLimits(rpm=1), Counters(rpm_logged=1, rpm_pivot=NOW), 0, Verdict(False, "rpm", 60)),
    ("rpm log ignores the minute counters", KeyLimits(rpm=3), Counters(rpm_prev=9, rpm_curr=9), 0, Verdict(True)),
    ("tpm empty window admits a big request", KeyLimits(tpm=10), Counters(), 500, Verdict(True)),
    ("tpm reserve fits", KeyLimits(tpm=100), Counters(tpm_curr=50), 50, Verdict(True)),
    ("tpm reserve does not fit", KeyLimits(tpm=100), Counters(tpm_curr=60), 50, Verdict(False, "tpm", 60)),
    ("budget left", KeyLimits(budget_usd=1.0), Counters(spent_micro_usd=999_999), 0, Verdict(True)),
    ("budget spent", KeyLimits(budget_usd=1.0, budget_period="day"), Counters(spent_micro_usd=10**6), 0, Verdict(False, "budget", DAY_END)),
    ("rpm checked first", KeyLimits(rpm=1, budget_usd=1.0), Counters(rpm_logged=1, rpm_pivot=NOW - 10, spent_micro_usd=10**7), 0,
     Verdict(False, "rpm", 50)),
]


@pytest.mark.parametrize(("limits", "counters", "reserve", "verdict"), [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS])
def test_decide(limits: KeyLimits, counters: Counters, reserve: int, verdict: Verdict) -> None:
    assert decide(limits, counters, NOW, reserve) == verdict


COUNTER_DECISIONS = [
    # RPM above rpm_log_max: the sliding-window counter (the log's fields are not read)
    ("rpm room", KeyLimits(rpm=3), Counters(rpm_curr=2, rpm_logged=9), Verdict(True)),
    ("rpm full", KeyLimits(rpm=3), Counters(rpm_curr=3), Verdict(False, "rpm", 70)),
    ("rpm previous minute counts", KeyLimits(rpm=3), Counters(rpm_prev=4), Verdict(False, "rpm", 20)),
    ("rpm checked first", KeyLimits(rpm=1, budget_usd=1.0), Counters(rpm_curr=1, spent_micro_usd=10**7), Verdict(False, "rpm", 110)),
]


@pytest.mark.parametrize(("limits", "counters", "verdict"), [d[1:] for d in COUNTER_DECISIONS], ids=[d[0] for d in COUNTER_DECISIONS])
def test_decide_above_the_log_threshold(limits: KeyLimits, counters: Counters, verdict: Verdict) -> None:
    assert decide(limits, counters, NOW, 0, rpm_log_max=0) == verdict


def test_the_threshold_is_inclusive() -> None:
    full = Counters(rpm_curr=5, rpm_logged=5, rpm_pivot=NOW - 1)
    assert decide(KeyLimits(rpm=5), full, NOW, 0, rpm_log_max=5) == Verdict(False, "rpm", 59)  # logged
    assert decide(KeyLimits(rpm=5), full, NOW, 0, rpm_log_max=4).retry_after_s == 62  # counted: 50 s, then 5 * (1 - f) <= 4


@pytest.mark.parametrize(
    ("pivot", "now", "wait"),
    [(0.0, 0.0, 60), (0.0, 59.0, 1), (0.0, 59.5, 1), (0.0, 60.0, 1), (0.0, 75.0, 1), (10.25, 12.0, 59), (10.0, 12.75, 58)],
)
def test_log_wait(pivot: float, now: float, wait: int) -> None:
    assert log_wait(NOW + pivot, NOW + now) == wait


@pytest.mark.parametrize(
    ("models", "model", "alias_of", "allowed"),
    [
        (None, "anything", None, True),
        (frozenset({"qwen"}), "qwen", None, True),
        (frozenset({"qwen"}), "q", "qwen", True),  # an alias of an allowed model
        (frozenset({"qwen"}), "o", "other", False),  # an alias of another model
        (frozenset({"q"}), "q", "qwen", True),  # the alias listed itself
        (frozenset({"q"}), "qwen", None, False),  # listing an alias grants only that alias
        (frozenset(), "qwen", None, False),
    ],
)
def test_a_model_list_admits_its_models_and_their_aliases(models, model, alias_of, allowed) -> None:
    assert KeyLimits(models=models).allows(model, alias_of) is allowed
