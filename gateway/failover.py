"""Failover rules, pure: the one outcome classifier (:func:`classify`: retry | relay | client error),
how long to wait, which headers an error answer keeps, and which clusters to walk.

kvgate's contract (README, "Failover"):

* **Before any byte reaches the client**, a failed attempt moves on: connection errors,
  timeouts before the first byte, 5xx, 408, 429 (``Retry-After`` honoured up to
  ``max_retry_after_s``, waited only before an attempt that will be made), an in-band error as
  the first stream event, an empty or malformed answer. Client errors (other 4xx) are relayed,
  never retried, never held against the endpoint.
* **A 429 with ``Retry-After``** is no failure of the endpoint: it *cools* it (out of rotation
  until then, capped at ``upstream.max_rate_limit_cooldown_s``); the breaker hears nothing.
  When every endpoint of a route is cooling or refused by its breaker, the answer is a 503 with
  ``Retry-After`` = the soonest time one may be tried, and none is called.
* **An endpoint's error answer that is relayed** (its 4xx, or the last 429) keeps its
  rate-limit headers: ``Retry-After`` and every ``x-ratelimit-*`` (:func:`rate_limit_headers`).
* **After content was sent**, a plain-text stream may be *continued* on another endpoint of the
  same model (see ``gateway/continuation.py``); tool calls and strict JSON outputs never are.
  Otherwise the client gets one OpenAI error event and the stream closes.

``X-Failover-Route`` (consumed, never forwarded): ``true`` skips the primary cluster and uses
the failover chain; ``false`` disables failover (one attempt, on the primary); a route or
cluster name forces that route; anything else is a 400.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import replace

from gateway.errors import InvalidRequestError
from gateway.selection.route import Route

RETRYABLE_STATUSES = frozenset({408, 429})


class Verdict(enum.Enum):
    """What the attempt loop does with one attempt's outcome (:func:`classify`)."""

    RETRY = "retry"  # nothing reached the client: the next endpoint may be tried
    RELAY = "relay"  # the answer (or its break, bytes already sent) is the relay's: no retry here
    CLIENT_ERROR = "client_error"  # the endpoint's own 4xx, the client's fault: relayed, never retried or counted


RETRY, RELAY, CLIENT_ERROR = Verdict.RETRY, Verdict.RELAY, Verdict.CLIENT_ERROR


def classify(outcome: int | BaseException, bytes_sent: int = 0) -> Verdict:
    """The one failover rule: an endpoint's HTTP status, or the error an attempt raised, given how
    many bytes of the answer already reached the client.

    * a status: 2xx is relayed; another 4xx than 408/429 is the client's error; 3xx, 408, 429 and
      5xx are retried (a redirect is never followed nor relayed: the prompt stays put);
    * an error (connection, timeout, broken or empty body, in-band first-event error): retried
      while ``bytes_sent`` is 0, else the relay's (continued or ended with an error event).
    """
    if isinstance(outcome, BaseException):
        return RETRY if bytes_sent == 0 else RELAY
    if outcome < 300:
        return RELAY
    if 400 <= outcome < 500 and outcome not in RETRYABLE_STATUSES:
        return CLIENT_ERROR
    return RETRY if bytes_sent == 0 else RELAY


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an endpoint's answer that are relayed with it: ``Retry-After`` and ``x-ratelimit-*``
    (OpenAI's ``x-ratelimit-limit-requests``, ``-remaining-tokens``, ``-reset-requests`` ...), lower-cased names."""
    kept = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "retry-after" or lowered.startswith("x-ratelimit-"):
            kept[lowered] = value
    return kept


def retry_after_s(value: str | None, cap_s: float) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds form), capped; 0 if absent/bad."""
    if not value:
        return 0.0
    try:
        seconds = float(value.strip())
    except ValueError:
        return 0.0
    return max(0.0, min(seconds, cap_s))


def apply_failover_header(header: str | None, route: Route, routes: Mapping[str, Route]) -> Route:
    """The effective route for a request carrying ``X-Failover-Route: header``.

    Args:
        header: the raw header value, or None when absent.
        route: the route the model selected.
        routes: every named route and every cluster (as a one-cluster route), by name.

    Raises:
        InvalidRequestError: (400) a value that is none of true/false/a route/a cluster, or
            ``true`` on a route without a failover chain.
    """
    if header is None:
        return route
    value = header.strip()
    lowered = value.lower()
    if lowered == "false":
        return replace(route, clusters=route.clusters[:1], failover=False, reason="header:false")
    if lowered == "true":
        if len(route.clusters) < 2:
            raise InvalidRequestError(
                f"X-Failover-Route: true, but route '{route.name}' has no failover chain.", param="X-Failover-Route"
            )
        return replace(route, clusters=route.clusters[1:], reason="header:true")
    forced = routes.get(value)
    if forced is not None:
        return replace(forced, reason="header:route")
    raise InvalidRequestError(
        "X-Failover-Route must be 'true', 'false', a route name or a cluster name; "
        f"got {value[:64]!r}.",
        param="X-Failover-Route",
    )
