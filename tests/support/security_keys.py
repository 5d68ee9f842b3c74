"""Shared pieces of the security tier (``tests/security``): keys, SDK clients and served gateways.

The security tests attack a real kvgate on loopback as a client would: through the official
``openai`` SDK (never retrying, so every answer is the gateway's own), with raw ``httpx`` only
where no SDK call exists (admin routes). :func:`serve` starts a :class:`RunningGateway` in a
``with`` block; :func:`sdk` makes a client for one key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai

from tests.support.gateway import RunningGateway

ADMIN_KEY = "adm-security-0123456789"
LIMITED_KEY = "sk-security-limited-0123456789"
"""A config key allowed only model ``model-a``."""
OPEN_KEY = "sk-security-open-0123456789"
"""A config key without limits."""

LIMITED_KEYS: dict[str, Any] = {
    "keys": [
        {"name": "limited", "key": LIMITED_KEY, "models": ["model-a"]},
        {"name": "open", "key": OPEN_KEY},
    ]
}
"""An ``[auth]`` section with the two keys above."""

NEVER_EJECT = {
    "circuit": {"consecutive_failures": 1_000_000, "min_requests": 1_000_000},
    "health": {"unhealthy_threshold": 1_000_000, "interval_s": 60},
}


@contextmanager
def serve(data: dict[str, Any], **app_kwargs: Any) -> Iterator[RunningGateway]:
    """kvgate serving ``data`` on a free loopback port while the block runs."""
    gateway = RunningGateway(data, **app_kwargs).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def sdk(gateway: RunningGateway, key: str = "sk-unused") -> openai.OpenAI:
    """An SDK client of ``gateway`` for ``key`` that never retries."""
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


MESSAGES = [{"role": "user", "content": "hi"}]
