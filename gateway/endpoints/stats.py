"""The stats board: each endpoint's latest :class:`EngineStats` and when it was scraped.

A side table keyed by endpoint name (the endpoint objects stay as they are). Written only by the
scraper (``endpoints/scraper.py``), read by the scheduler, which marks entries older than
``routing.scrape.stale_after_s`` as stale (their load scorers turn neutral).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.endpoints.metrics_parse import EngineStats


@dataclass(frozen=True, slots=True)
class Scrape:
    """One successful scrape: the figures and the monotonic time they were read."""

    stats: EngineStats
    at: float


class StatsBoard:
    """Latest scrape per endpoint name."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, Scrape] = {}

    def get(self, name: str) -> Scrape | None:
        return self._entries.get(name)

    def fresh(self, name: str, now: float, stale_after_s: float) -> Scrape | None:
        """The endpoint's scrape if it was read at most ``stale_after_s`` seconds before ``now``, else None."""
        scrape = self._entries.get(name)
        return scrape if scrape is not None and now - scrape.at <= stale_after_s else None

    def put(self, name: str, stats: EngineStats, at: float) -> Scrape | None:
        """Store a scrape; returns the previous one."""
        previous = self._entries.get(name)
        self._entries[name] = Scrape(stats, at)
        return previous

    def drop(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return list(self._entries)
