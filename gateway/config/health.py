"""``[health]``: active health checks of endpoints and the stall detector.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.section import Section


class HealthSettings(Section):
    """Active health checks (``GET`` each endpoint's health URL)."""

    interval_s: float = Field(5.0, gt=0, description="Seconds between two checks of one endpoint.")
    timeout_s: float = Field(2.0, gt=0, description="Timeout of one check, seconds.")
    unhealthy_threshold: int = Field(2, ge=1, description="Consecutive failed checks that eject.")
    healthy_threshold: int = Field(1, ge=1, description="Consecutive successful checks that re-admit.")
    stall_s: float = Field(
        30.0, ge=0, description="Running requests but no new tokens for this long (scraped metrics): stalled, "
        "no new requests. 0 disables."
    )
    probe: Literal["health", "generation"] = Field(
        "health",
        description="health: GET the health URL; generation: also a 1-token completion (catches an engine "
        "that answers /health but cannot generate; works for reasoning models).",
    )
