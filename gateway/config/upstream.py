"""``[upstream]``, ``[upstream.timeouts]`` and ``[circuit]``: how kvgate talks to endpoints, how long an
attempt may take, and when an endpoint's circuit breaker opens.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.section import Section


class TimeoutSettings(Section):
    """Per-attempt time limits, seconds. ``[upstream.timeouts]`` sets defaults; a route may override.

    Long healthy streams are never cut by a total limit: ``total_s`` applies to non-streaming
    requests only; streams are bounded by ``first_byte_s`` and then ``idle_s`` between chunks.
    """

    connect_s: float = Field(5.0, gt=0, description="TCP connect to an endpoint.")
    first_byte_s: float = Field(300.0, gt=0, description="Request sent -> first body bytes (covers prefill).")
    idle_s: float = Field(120.0, gt=0, description="Longest silence between two stream chunks.")
    total_s: float = Field(600.0, gt=0, description="Whole non-streaming attempt.")


class CircuitSettings(Section):
    """Circuit breaker per endpoint (see gateway/endpoints/circuit.py)."""

    consecutive_failures: int = Field(5, ge=1, description="Failures in a row that open the breaker.")
    failure_ratio: float = Field(0.5, gt=0, le=1, description="Failure share in the window that opens it.")
    min_requests: int = Field(20, ge=1, description="Outcomes needed in the window before the ratio counts.")
    window_s: float = Field(30.0, gt=0, description="Sliding window for the ratio, seconds.")
    cooldown_s: float = Field(5.0, gt=0, description="Open for this long before one half-open probe, seconds.")
    max_cooldown_s: float = Field(60.0, gt=0, description="Cap of the cooldown, doubled after each failed probe.")


class UpstreamSettings(Section):
    """The pooled HTTP client that talks to endpoints (chosen by measurement: bench/upstream_client.py)."""

    client: Literal["native", "aiohttp"] = Field(
        "native",
        description="native: kvgate's HTTP/1.1 client (httptools parser, gateway/upstream/native.py), the least "
        "CPU per request; aiohttp: aiohttp's client, kept as a fallback.",
    )
    pool_size: int = Field(1024, ge=1, description="Most open connections to all endpoints together.")
    keepalive_s: float = Field(60.0, ge=0, description="Idle keep-alive connections are closed after this, seconds.")
    max_attempts: int = Field(
        3, ge=1, le=10, description="Endpoints tried per request before the gateway gives up (502/503/504)."
    )
    max_retry_after_s: float = Field(
        2.0, ge=0, description="Longest Retry-After (from a 429/503) honoured before the next attempt, seconds."
    )
    max_rate_limit_cooldown_s: float = Field(
        60.0, ge=0, description="A 429 with Retry-After takes its endpoint out of rotation for that long, capped "
        "at this many seconds (no breaker failure counted); 0 disables the cooldown."
    )
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
