"""Client API keys: ``Authorization: Bearer KEY``.

Keys are held only as SHA-256 digests; a presented key is hashed and looked up, so the lookup
time does not depend on how much of a stored key matches. With no keys configured, every request
is accepted (settings allow that only on a loopback host).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from gateway.errors import AuthenticationError


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _masked(key: str) -> str:
    return f"{key[:3]}***{key[-2:]}" if len(key) > 8 else "***"


class KeyChecker:
    """Checks the ``Authorization`` header against the configured client keys."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = frozenset(_digest(key) for key in keys)

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None) -> None:
        """Accept or raise.

        Raises:
            AuthenticationError: (401) missing header, not Bearer, or unknown key.
        """
        if not self._digests:
            return
        if not authorization:
            raise AuthenticationError(
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise AuthenticationError("The Authorization header must be 'Bearer YOUR_KEY'.")
        if _digest(key) not in self._digests:
            raise AuthenticationError(f"Incorrect API key provided: {_masked(key)}.")
