"""Per-request limits from headers, over the key's defaults from config.

Headers (consumed here; kvgate forwards only the body and its own headers upstream):

* ``X-Max-TTFT-Ms``: the largest predicted time to first token the client accepts, in
  milliseconds (a positive number, at most :data:`MAX_TTFT_MS`);
* ``X-Max-Cost-USD``: the largest estimated cost of this request, in USD (a positive number).

Either overrides the key's default (``[route_selection.keys.NAME]``, else
``[route_selection.defaults]``). A value that is not a positive finite number is a 400
``invalid_request_error`` naming the header. Limits steer ``auto`` only (``selection/policy.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gateway.errors import InvalidRequestError
from gateway.config import KeyRouteLimits

TTFT_HEADER = "x-max-ttft-ms"
COST_HEADER = "x-max-cost-usd"
MAX_TTFT_MS = 86_400_000.0


def _positive(headers: Mapping[str, str], name: str, display: str, upper: float) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= upper):
        bound = f" (at most {upper:g})" if math.isfinite(upper) else ""
        raise InvalidRequestError(f"{display} must be a positive finite number{bound}; got {raw[:32]!r}.", param=display)
    return value


def request_limits(headers: Mapping[str, str], defaults: KeyRouteLimits) -> tuple[float | None, float | None]:
    """``(max_ttft_s, max_cost_usd)`` for one request.

    Args:
        headers: the request headers (case-insensitive mapping, e.g. Starlette's).
        defaults: the key's default limits.

    Raises:
        InvalidRequestError: (400) a header's value is not a positive finite number.
    """
    ttft_ms = _positive(headers, TTFT_HEADER, "X-Max-TTFT-Ms", MAX_TTFT_MS)
    cost = _positive(headers, COST_HEADER, "X-Max-Cost-USD", math.inf)
    if ttft_ms is None:
        ttft_ms = defaults.max_ttft_ms
    if cost is None:
        cost = defaults.max_cost_usd
    return (ttft_ms / 1000.0 if ttft_ms is not None else None), cost
