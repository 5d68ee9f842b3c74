"""API keys: the record kept per key, its limits, and how secrets are made and stored.

A secret is ``sk-kvg-`` followed by 32 URL-safe random characters (about 190 bits, from
:func:`secrets.token_urlsafe`). It is shown once, when the key is created; kvgate keeps only its
SHA-256 digest (hex) and its first 12 characters (``prefix``), so a person can recognise a key in
a listing. A presented key is hashed and looked up by digest, so lookup time does not depend on
how much of a stored key matches.

Where keys come from (``source``):
    ``config``: ``[[auth.keys]]`` entries (id ``cfg-NAME``) and plain ``auth.api_keys`` entries
        (id ``cfg-`` + 12 hex characters of the digest, no limits);
    ``admin``: made through ``POST /admin/keys`` and kept in the state store (id ``key-`` +
        12 random hex characters).

Limits (all optional, ``None`` = unlimited): the public models a key may use, requests per
minute, tokens per minute, and a spend budget in USD per UTC calendar period.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from gateway.config import AuthSettings

SECRET_PREFIX = "sk-kvg-"
PERIODS = ("hour", "day", "week", "month")


def digest(secret: str) -> str:
    """SHA-256 of ``secret`` (UTF-8), hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret(token: Callable[[int], str] = secrets.token_urlsafe) -> str:
    """A fresh secret: ``sk-kvg-`` + 32 URL-safe characters (``token`` is injected in tests)."""
    return SECRET_PREFIX + token(24)


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """What one key may do. ``None`` means no limit."""

    models: frozenset[str] | None = None
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    budget_period: str = "month"

    def allows(self, model: str, alias_of: str | None = None) -> bool:
        """True if the key may call ``model``: no list, ``model`` in it, or ``model`` is an alias
        (``[models.NAME] aliases``) of ``alias_of`` and that public name is in it. Listing an alias
        grants that alias only, not the model's own name or its other aliases."""
        models = self.models
        return models is None or model in models or (alias_of is not None and alias_of in models)

    @property
    def metered(self) -> bool:
        """True if any counter must be kept for this key (RPM, TPM or budget)."""
        return self.rpm is not None or self.tpm is not None or self.budget_usd is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["models"] = sorted(self.models) if self.models is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KeyLimits:
        models = data.get("models")
        return cls(
            models=frozenset(models) if models is not None else None,
            rpm=data.get("rpm"),
            tpm=data.get("tpm"),
            budget_usd=data.get("budget_usd"),
            budget_period=data.get("budget_period") or "month",
        )


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One API key as stored (never the secret).

    Attributes:
        id: stable identifier, used in URLs, usage records and quota counters.
        name: a person's label for the key.
        prefix: the secret's first 12 characters.
        digest: SHA-256 hex of the secret.
        created_at: Unix time, seconds.
        source: ``config`` or ``admin``.
        revoked: a revoked key authenticates nothing; its record stays for usage history.
    """

    id: str
    name: str
    prefix: str
    digest: str
    limits: KeyLimits = field(default_factory=KeyLimits)
    created_at: float = 0.0
    source: str = "admin"
    revoked: bool = False

    def public(self) -> dict[str, Any]:
        """What the admin API shows: everything but the digest."""
        return {
            "id": self.id,
            "name": self.name,
            "prefix": self.prefix,
            "source": self.source,
            "created_at": int(self.created_at),
            "revoked": self.revoked,
            "limits": self.limits.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        """The stored form (with the digest)."""
        return {**self.public(), "digest": self.digest, "created_at": self.created_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KeyRecord:
        return cls(
            id=data["id"],
            name=data["name"],
            prefix=data["prefix"],
            digest=data["digest"],
            limits=KeyLimits.from_dict(data.get("limits") or {}),
            created_at=float(data.get("created_at") or 0),
            source=data.get("source", "admin"),
            revoked=bool(data.get("revoked")),
        )


def new_key(
    name: str, limits: KeyLimits, now: float, token: Callable[[int], str] = secrets.token_urlsafe
) -> tuple[str, KeyRecord]:
    """A new admin key: (the secret, to show once; its record, to store)."""
    secret = new_secret(token)
    key_id = "key-" + hashlib.sha256(token(16).encode()).hexdigest()[:12]
    return secret, KeyRecord(key_id, name, secret[:12], digest(secret), limits, now, "admin")


def config_keys(auth: AuthSettings) -> list[KeyRecord]:
    """The keys of the config file: named ``[[auth.keys]]`` with limits, then plain ``api_keys``."""
    records = []
    for entry in auth.keys:
        secret = entry.key.get_secret_value()
        limits = KeyLimits(
            models=frozenset(entry.models) if entry.models is not None else None,
            rpm=entry.rpm,
            tpm=entry.tpm,
            budget_usd=entry.budget_usd,
            budget_period=entry.budget_period,
        )
        records.append(KeyRecord(f"cfg-{entry.name}", entry.name, secret[:12], digest(secret), limits, 0.0, "config"))
    for index, key in enumerate(auth.api_keys):
        hashed = digest(key.get_secret_value())
        shown = key.get_secret_value()[:3] + "..."
        records.append(KeyRecord(f"cfg-{hashed[:12]}", f"api_keys[{index}]", shown, hashed, KeyLimits(), 0.0, "config"))
    return records


def records_from(documents: Iterable[dict[str, Any]]) -> list[KeyRecord]:
    """Decode stored records, skipping any that do not parse (a newer writer's format)."""
    records = []
    for document in documents:
        try:
            records.append(KeyRecord.from_dict(document))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return records
