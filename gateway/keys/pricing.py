"""Prices per cluster and the cost of one request, from its usage.

Prices are USD per 1M tokens (``[clusters.NAME.price]``): uncached input, cached input (prompt
tokens the engine served from its prefix cache; defaults to the input price) and output. The cost
of a request is

    ((prompt_tokens - cached_tokens) * input + cached_tokens * cached_input
     + completion_tokens * output) / 1e6  USD

with the counts from the answer's OpenAI ``usage`` object (``prompt_tokens_details.cached_tokens``
for cached tokens). :class:`Pricing` holds the prices in force; the admin API and a config reload
replace them whole (readers see the old or the new table, never a mix).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config import ClusterSettings, PriceSettings


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M tokens."""

    input_per_mtok: float = 0.0
    cached_input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    @classmethod
    def from_settings(cls, price: PriceSettings) -> Price:
        cached = price.cached_input_per_mtok if price.cached_input_per_mtok is not None else price.input_per_mtok
        return cls(price.input_per_mtok, cached, price.output_per_mtok)

    def to_dict(self) -> dict[str, float]:
        return {
            "input_per_mtok": self.input_per_mtok,
            "cached_input_per_mtok": self.cached_input_per_mtok,
            "output_per_mtok": self.output_per_mtok,
        }


FREE = Price()


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class TokenUsage:
    """Token counts of one answer: input (all prompt tokens), the cached part of it, output."""

    input: int = 0
    cached: int = 0
    output: int = 0

    @classmethod
    def from_openai(cls, usage: Any) -> TokenUsage | None:
        """From an OpenAI ``usage`` object; None if it is missing or malformed."""
        if type(usage) is not dict and not isinstance(usage, Mapping):  # a dict (parsed JSON) skips the ABC check
            return None
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if details is not None and isinstance(details, Mapping) else None
        return cls(_count(prompt), min(_count(cached), _count(prompt)), _count(completion))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def cost_usd(price: Price, tokens: TokenUsage) -> float:
    """The cost of ``tokens`` at ``price``, USD."""
    uncached = tokens.input - tokens.cached
    return (
        uncached * price.input_per_mtok + tokens.cached * price.cached_input_per_mtok + tokens.output * price.output_per_mtok
    ) / 1_000_000


class Pricing:
    """The price of each cluster now in force."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(prices or {})
        self.version = 0  # bumped by every change, so derived tables know when to rebuild

    @classmethod
    def from_settings(
        cls, clusters: Mapping[str, ClusterSettings], overrides: Mapping[str, Price] | None = None
    ) -> Pricing:
        """Each cluster's ``[clusters.NAME.price]``, then ``overrides`` (admin-set prices) for known clusters."""
        prices = {name: Price.from_settings(cluster.price) for name, cluster in clusters.items()}
        prices.update({name: price for name, price in (overrides or {}).items() if name in prices})
        return cls(prices)

    def replace(self, other: Pricing) -> None:
        self._prices = dict(other._prices)
        self.version += 1

    def get(self, cluster: str) -> Price:
        return self._prices.get(cluster, FREE)

    def items(self) -> list[tuple[str, Price]]:
        return list(self._prices.items())
