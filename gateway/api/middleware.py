"""Pure-ASGI middleware: the request id on every request and response.

The id comes from the client's ``X-Request-Id`` header when it is sane (1-128 characters of
``[A-Za-z0-9._:-]``), else a new random 128-bit hex id (:func:`new_request_id`). It is stored as
``scope["state"]["request_id"]`` (Starlette's ``request.state.request_id``), sent to the endpoint
as ``X-Request-Id``, and returned to the client in the ``x-request-id`` response header.
"""

from __future__ import annotations

import random
import re
from typing import Any

_SANE_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def new_request_id() -> bytes:
    """A random 128-bit id, 32 lowercase hex digits.

    From :mod:`random` (Mersenne Twister, seeded from the OS and re-seeded in forked children), not
    ``os.urandom``: an id names a request, it guards nothing, and the system call cost ~0.5 us.
    """
    return b"%032x" % random.getrandbits(128)


def incoming_request_id(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The client's ``X-Request-Id`` if sane, else None."""
    for name, value in headers:
        if name == b"x-request-id":
            return value if _SANE_ID.fullmatch(value) else None
    return None


class RequestIdMiddleware:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = incoming_request_id(scope["headers"]) or new_request_id()
        scope.setdefault("state", {})["request_id"] = raw.decode()

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", raw)]
            await send(message)

        await self.app(scope, receive, send_with_id)
