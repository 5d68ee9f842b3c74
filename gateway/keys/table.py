"""The key table of one replica: who a presented ``Authorization: Bearer KEY`` is.

The table holds every key record by digest: the config file's keys plus those in the state
store, which the admin sync loop (``gateway/state/admin_sync.py``) refreshes whenever another
replica changes them. Authentication is therefore a local dict lookup; a key created or revoked on
one replica takes effect on the others within ``admin.sync_interval_s``.

When is a key required? When ``auth.required = true``, and as soon as any key exists: one in
the config file, or any record in the state store, revoked ones included (revoking the last key
must never re-open the gateway). Once required, a key stays required for the life of the process
(:attr:`KeyTable.required` latches): a state store that loses its data (Redis restarted empty)
takes the stored keys with it, and then every request is refused, never admitted anonymously.
To keep auth on across a restart with an empty store as well, set ``auth.required = true``.
With no key at all and auth not required (allowed only on a loopback host), every request is
accepted as :data:`ANONYMOUS`.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.errors import AuthenticationError
from gateway.keys.model import KeyRecord, digest

ANONYMOUS = KeyRecord(id="anonymous", name="anonymous", prefix="", digest="", source="none")
MAX_SEEN = 10_000
"""Accepted ``Authorization`` values whose digest is remembered (the cache is emptied when full)."""
MAX_SEEN_CHARS = 256
"""Longer ``Authorization`` values are not remembered (bounds the cache's memory: 10k x 256 chars)."""


def _masked(key: str) -> str:
    return f"{key[:3]}***{key[-2:]}" if len(key) > 8 else "***"


class KeyTable:
    """Key records by digest; replaced whole by :meth:`replace` (readers see old or new)."""

    def __init__(self, config: Iterable[KeyRecord] = (), *, required: bool = False) -> None:
        self._config = tuple(config)
        self._required = required  # latched: once True, True until the process ends
        self._stored: tuple[KeyRecord, ...] = ()
        self._by_digest: dict[str, KeyRecord] = {}
        self._by_id: dict[str, KeyRecord] = {}
        # header value -> digest, for keys accepted before: SHA-256 once per key, not per request
        # (about 1.7 us); the record is still looked up by digest each time, so a revoked key fails
        self._seen: dict[str, str] = {}
        self._rebuild()

    def _rebuild(self) -> None:
        records = (*self._config, *self._stored)
        self._by_digest = {record.digest: record for record in records if not record.revoked}
        self._by_id = {record.id: record for record in records}
        self._required = self._required or bool(self._by_id)

    def replace(
        self,
        *,
        config: Iterable[KeyRecord] | None = None,
        stored: Iterable[KeyRecord] | None = None,
        required: bool = False,
    ) -> None:
        """Swap the config keys (reload) and/or the stored keys (sync); ``required`` can only
        switch auth on (``auth.required`` after a reload), never off."""
        self._required = self._required or required
        if config is not None:
            self._config = tuple(config)
        if stored is not None:
            self._stored = tuple(stored)
        self._rebuild()

    def upsert(self, record: KeyRecord) -> None:
        """Apply one stored record at once (on the replica that wrote it)."""
        self.replace(stored=[*(r for r in self._stored if r.id != record.id), record])

    @property
    def required(self) -> bool:
        """Whether a request needs a key (see the module docstring: latched once True)."""
        return self._required

    def get(self, key_id: str) -> KeyRecord | None:
        return self._by_id.get(key_id)

    def records(self) -> list[KeyRecord]:
        """Every key, config first, then stored keys by creation time."""
        return [*self._config, *sorted(self._stored, key=lambda record: record.created_at)]

    def authenticate(self, authorization: str | None) -> KeyRecord:
        """The key behind the ``Authorization`` header.

        Raises:
            AuthenticationError: (401) a key is required and the header is missing, not Bearer,
                unknown or revoked.
        """
        if not self._required:
            return ANONYMOUS
        seen = self._seen.get(authorization) if authorization else None
        if seen is not None:
            record = self._by_digest.get(seen)
            if record is not None:
                return record
        if not authorization:
            raise AuthenticationError(
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise AuthenticationError("The Authorization header must be 'Bearer YOUR_KEY'.")
        hashed = digest(key)
        record = self._by_digest.get(hashed)
        if record is None:
            raise AuthenticationError(f"Incorrect API key provided: {_masked(key)}.")
        if len(authorization) <= MAX_SEEN_CHARS:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen[authorization] = hashed
        return record
