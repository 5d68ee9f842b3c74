"""``[auth]`` and ``[quotas]``: client API keys (plain and named, with limits) and how quotas are enforced.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from gateway.config.section import Section


class ClientKeySettings(Section):
    """A named client key from the config file and its limits (admin-made keys live in the state store)."""

    name: str = Field(min_length=1, description="Unique name, shown in usage records and metrics.")
    key: SecretStr = Field(description="The secret. Prefer env: KVGATE__AUTH__KEYS='[{...}]'.")
    models: list[str] | None = Field(None, description="Public models (or aliases) this key may use; None: all.")
    rpm: int | None = Field(None, ge=1, description="Requests per minute: at most this many in any 60 s up to 1,000 (a sliding log); above, a "
        "sliding-window counter, which a burst across a minute boundary can exceed by up to ~2x; None: no limit.")
    tpm: int | None = Field(None, ge=1, description="Tokens per minute (input + output, sliding window).")
    budget_usd: float | None = Field(None, gt=0, description="Spend allowed per budget_period, USD.")
    budget_period: Literal["hour", "day", "week", "month"] = Field("month", description="UTC calendar period.")


class AuthSettings(Section):
    """Client API keys, sent as ``Authorization: Bearer KEY``."""

    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Accepted client keys. Empty means no auth, allowed only on a loopback host.",
    )
    keys: list[ClientKeySettings] = Field(
        default_factory=list, description="Named client keys with limits (see [[auth.keys]])."
    )
    required: bool = Field(
        False,
        description="Require a client key even while none exists (keys made only through the admin API): "
        "a state store that comes back empty then refuses every request instead of admitting anyone.",
    )

    def has_keys(self) -> bool:
        """True if any client key is configured (plain or named)."""
        return bool(self.api_keys or self.keys)


class QuotaSettings(Section):
    """Per-key quota enforcement (limits are set per key)."""

    on_store_error: Literal["allow", "deny"] = Field(
        "allow", description="When the state store is unreachable: allow (fail open, counted) or deny (503)."
    )
    usage_retention_days: int = Field(35, ge=1, description="Days a per-key daily usage record is kept.")
    store_timeout_s: float = Field(0.5, gt=0, description="Connect and read timeout of one quota call to Redis, s.")
    settle_interval_s: float = Field(
        0.05, ge=0, description="Usage settlements are gathered this long and written as one batch (s; 0: at once).",
    )


def check_named_keys(auth: AuthSettings, admin_key: str | None) -> None:
    """``auth.keys``: unique names and secrets, none equal to a plain client key or the admin key."""
    plain = {key.get_secret_value() for key in auth.api_keys}
    names: set[str] = set()
    secrets: set[str] = set()
    for index, entry in enumerate(auth.keys):
        secret = entry.key.get_secret_value()
        if entry.name in names:
            raise ValueError(f"auth.keys.{index}.name: duplicate key name {entry.name!r}")
        if secret in secrets or secret in plain or (admin_key and secret == admin_key):
            raise ValueError(f"auth.keys.{index}.key: must differ from every other key and the admin key")
        names.add(entry.name)
        secrets.add(secret)
