"""Response affinity: which endpoint holds a stored Responses-API response (id -> endpoint name).

A stored response (``store`` not false, or ``background``), its conversation chain and its
encrypted reasoning items live only on the endpoint that made it: vLLM keeps them in that
process's memory. kvgate records ``response id -> endpoint name`` when the answer comes back
(:meth:`record`), and routes a request that depends on one (``previous_response_id``,
``GET /v1/responses/{id}``, ``.../cancel``, ``DELETE``) to that endpoint (:func:`resolve`). A miss
or an endpoint that cannot be tried is an OpenAI-shaped error naming the cause, never an answer
from an endpoint that lacks the history:

- :class:`StoredResponseNotFoundError` (404 ``invalid_request_error``, code
  ``response_not_found``): kvgate has no record of the id (never stored through kvgate, or
  older than the TTL), or another key created it (each record carries its creator's key id,
  :func:`entry`; with no keys configured there is none and every client may use it);
- :class:`StoredResponseUnavailableError` (503 ``server_error``, code
  ``stored_response_unavailable``): the endpoint that holds it is gone, down or its circuit is
  open; the state is gone with it (or until it is back).

Two implementations of one seam (:class:`ResponseAffinity`):

- :class:`MemoryResponseAffinity`: this process only; entries expire after ``ttl_s`` and at
  most ``max_entries`` are kept (the oldest go first). The clock is injected.
- :class:`RedisResponseAffinity`: every replica knows every record. One key per response,
  ``P resp:ID`` (``P`` = ``[state] key_prefix``) holding the endpoint name, written with
  ``SET ... EX ttl_s``; a lookup is one ``GET``. Its own records are also kept in a local
  :class:`MemoryResponseAffinity` (answered without a round trip; used while Redis fails). A
  Redis failure on :meth:`record` is counted (``write_errors``) and the local record stands; on a
  lookup the local miss becomes :class:`~gateway.errors.StateStoreError` (503): the cause, not a
  wrong endpoint. Each call is bounded by ``deadline_s``.

Defaults (to put under ``[state]``): ``response_ttl_s = 86400`` (one day; vLLM keeps stored
responses in memory until it restarts), ``response_max_entries = 100000`` (about 15 MB).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.deadlines import deadline
from gateway.errors import GatewayError, StateStoreError

DEFAULT_TTL_S = 86_400.0
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_DEADLINE_S = 0.25


class StoredResponseNotFoundError(GatewayError):
    """404: no endpoint is known to hold the response (never stored through kvgate, or expired)."""

    status = 404
    type = "invalid_request_error"
    code = "response_not_found"


class StoredResponseUnavailableError(GatewayError):
    """503: the endpoint that holds the response cannot be reached; its stored state is with it."""

    status = 503
    type = "server_error"
    code = "stored_response_unavailable"


class StoredResponseReadError(GatewayError):
    """A read of a stored response (retrieve, cancel, delete) that its endpoint failed: that
    request's outcome, never a reason to retry elsewhere. ``status``: the endpoint's own 5xx
    (relayed), 502 for a broken answer, or 400 (``invalid_request_error``) for a streamed retrieve
    the endpoint cannot stream."""

    type = "server_error"
    code = "upstream_error"

    def __init__(self, message: str, *, status: int = 502, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message, param=param, headers=headers)
        self.status = status
        if status < 500:
            self.type, self.code = "invalid_request_error", "stream_not_available"


class ResponseAffinity(Protocol):
    """The seam: record where a response is stored, and look it up."""

    async def record(self, response_id: str, endpoint: str) -> None:
        """Remember that ``endpoint`` stores ``response_id`` (for ``ttl_s`` seconds); ``endpoint``
        may carry its owner's key id (:func:`entry`)."""
        ...

    async def lookup(self, response_id: str) -> str | None:
        """The entry recorded for ``response_id`` (:func:`entry`), or None if unknown or expired."""
        ...


def entry(endpoint: str, owner: str | None) -> str:
    """What is recorded for a stored response: the endpoint's name, then a tab and the id of the
    key that created it (none without keys: any client may then use it, as before)."""
    return endpoint if not owner else f"{endpoint}\t{owner}"


class MemoryResponseAffinity:
    """Response id -> endpoint, in this process, with a TTL and a bound (see the module docstring)."""

    def __init__(self, clock: Callable[[], float], ttl_s: float = DEFAULT_TTL_S,
                 max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if ttl_s <= 0 or max_entries < 1:
            raise ValueError("ttl_s must be > 0 and max_entries >= 1")
        self._clock = clock
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()  # id -> (endpoint, expires at)

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, endpoint: str) -> None:
        """:meth:`record`, synchronously."""
        entries = self._entries
        entries.pop(response_id, None)
        entries[response_id] = (endpoint, self._clock() + self.ttl_s)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def get(self, response_id: str) -> str | None:
        """:meth:`lookup`, synchronously (an expired entry is dropped)."""
        found = self._entries.get(response_id)
        if found is None:
            return None
        if found[1] <= self._clock():
            del self._entries[response_id]
            return None
        return found[0]

    async def record(self, response_id: str, endpoint: str) -> None:
        self.put(response_id, endpoint)

    async def lookup(self, response_id: str) -> str | None:
        return self.get(response_id)


class RedisResponseAffinity:
    """Response id -> endpoint shared by every replica through Redis (see the module docstring)."""

    def __init__(self, client: aioredis.Redis, prefix: str, clock: Callable[[], float], *,
                 ttl_s: float = DEFAULT_TTL_S, max_entries: int = DEFAULT_MAX_ENTRIES,
                 deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        self._redis = client
        self._prefix = prefix
        self._deadline_s = deadline_s
        self.local = MemoryResponseAffinity(clock, ttl_s, max_entries)
        self.write_errors = 0

    def key(self, response_id: str) -> str:
        """The Redis key of ``response_id``'s record."""
        return f"{self._prefix}resp:{response_id}"

    async def record(self, response_id: str, endpoint: str) -> None:
        self.local.put(response_id, endpoint)
        try:
            with deadline(self._deadline_s):
                await self._redis.set(self.key(response_id), endpoint, ex=max(1, round(self.local.ttl_s)))
        except (RedisError, OSError, TimeoutError):
            self.write_errors += 1

    async def lookup(self, response_id: str) -> str | None:
        found = self.local.get(response_id)
        if found is not None:
            return found
        try:
            with deadline(self._deadline_s):
                value = await self._redis.get(self.key(response_id))
        except (RedisError, OSError, TimeoutError) as exc:
            raise StateStoreError(
                f"Cannot tell which endpoint stores response '{response_id}': the state store failed ({exc!s:.200})."
            ) from None
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)


async def resolve(affinity: ResponseAffinity, response_id: str, param: str,
                  unavailable: Callable[[str], str | None], owner: str | None = None) -> str:
    """The endpoint to send a request that depends on ``response_id`` to.

    ``param``: the request field that named the id (``previous_response_id``, ``response_id``).
    ``unavailable(endpoint)``: None if the endpoint may be tried now, else why not (``"not in any
    cluster"``, ``"circuit open"``, ``"unhealthy"``, ...), from the director's snapshot.
    ``owner``: the asking key's id; a response another key created is not found for it (404, as
    OpenAI answers across projects). None (no keys configured): any recorded response is found.

    Raises:
        StoredResponseNotFoundError: no endpoint is known to store the response.
        StoredResponseUnavailableError: the endpoint that stores it cannot be tried now.
        StateStoreError: the shared store failed and this replica has no record of its own.
    """
    found = await affinity.lookup(response_id)
    endpoint, _, created_by = (found or "").partition("\t")
    if found is None or (owner is not None and created_by and created_by != owner):
        raise StoredResponseNotFoundError(
            f"Response with id '{response_id}' not found: kvgate has no record of an endpoint storing it "
            "(it was not stored through this gateway, or its record expired).", param=param,
        )
    why = unavailable(endpoint)
    if why is not None:
        raise StoredResponseUnavailableError(
            f"Response '{response_id}' is stored on endpoint '{endpoint}', which is unavailable ({why}); "
            "its stored state is only there. Retry later, or start again without it.", param=param,
        )
    return endpoint
