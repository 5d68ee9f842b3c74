"""``[admin]``: the admin REST API under ``/admin`` (its key, the networks admin-added endpoints may use).
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, SecretStr, field_validator

from gateway.config.section import Section


class AdminSettings(Section):
    """The admin REST API under ``/admin`` (disabled while ``api_key`` is empty)."""

    api_key: SecretStr | None = Field(
        None, description="Admin key (Bearer), distinct from client keys. Prefer env KVGATE__ADMIN__API_KEY."
    )
    allowed_networks: list[str] = Field(
        default_factory=lambda: ["127.0.0.0/8", "::1/128"],
        description="Networks (CIDR) an endpoint added through the admin API may resolve to.",
    )
    sync_interval_s: float = Field(
        1.0, gt=0, description="How often a replica polls the state store for admin changes, seconds."
    )
    request_log_size: int = Field(
        1000, ge=0, le=100_000,
        description="Recent requests each replica keeps in memory for GET /admin/requests and the console (0: off).",
    )

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"not a network in CIDR notation: {network!r}") from None
        return value
