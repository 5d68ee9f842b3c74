"""CORS for the APIs apps call (``/v1/...``): browsers may call kvgate from the origins listed.

Off unless ``[server] cors_allow_origins`` lists origins (``https://app.example.com``, or ``*``
for any). Then, for paths under ``/v1/`` only (the admin API, ``/metrics`` and the console stay
same-origin), Starlette's :class:`~starlette.middleware.cors.CORSMiddleware` (the Fetch
standard's CORS protocol, https://fetch.spec.whatwg.org/#http-cors-protocol):

* answers a preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) itself,
  before authentication, 200 for an allowed origin (any request header allowed: the official SDKs
  send ``x-stainless-*``, ``anthropic-version`` and the like; cached ``max_age`` seconds), 400 for
  one that is not;
* adds ``Access-Control-Allow-Origin`` and ``Access-Control-Expose-Headers`` (kvgate's own
  response headers: :data:`EXPOSED`) to every answer for an allowed origin, errors (401, 429, ...)
  and streams included, so a page can read them.

No credentials mode (cookies): clients send their key in ``Authorization`` or ``x-api-key``.
The raw protocol door (``api/server.py``) hands a request that carries ``Origin`` to the ASGI door
when CORS is on, so both doors answer the same.
"""

from __future__ import annotations

from typing import Any

from starlette.middleware.cors import CORSMiddleware

EXPOSED = (
    "x-request-id", "request-id", "retry-after", "x-kvgate-endpoint", "x-kvgate-cluster", "x-kvgate-route",
    "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
)
MAX_AGE_S = 600  # how long a browser may cache a preflight's answer, seconds
PREFIX = "/v1/"


class Cors:
    """CORS around ``app`` for ``/v1/`` paths (module doc); other paths go to ``app`` untouched.

    ``origins``: the allowed origins (``scheme://host[:port]``) or ``["*"]``; must not be empty.
    """

    __slots__ = ("_app", "_cors")

    def __init__(self, app: Any, origins: list[str]) -> None:
        if not origins:
            raise ValueError("Cors needs at least one origin")
        self._app = app
        self._cors = CORSMiddleware(
            app, allow_origins=origins, allow_methods=["GET", "POST", "DELETE", "OPTIONS"], allow_headers=["*"],
            expose_headers=list(EXPOSED), max_age=MAX_AGE_S,
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            await self._cors(scope, receive, send)
        else:
            await self._app(scope, receive, send)
