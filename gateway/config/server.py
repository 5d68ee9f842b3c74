"""``[server]``: the gateway's own HTTP listener (bind address, request limits, processes).
"""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gateway.config.section import MiB, Section

# The [server] settings every new connection reads from the live settings (gateway/api/http_limits.py,
# HttpLimits.of, in this order): a reload applies them to connections opened after it, no restart.
CONNECTION_LIMITS = (
    "max_header_bytes", "max_headers", "header_timeout_s", "body_timeout_s", "body_min_rate", "body_grace_s", "body_max_s",
)


class ServerSettings(Section):
    """The gateway's own HTTP listener."""

    host: str = Field("127.0.0.1", description="Interface to bind. Anything but loopback requires client keys.")
    port: int = Field(8080, ge=1, le=65535, description="TCP port.")
    max_body_bytes: int = Field(
        32 * MiB, ge=1024, description="Largest accepted request body in bytes; larger gets 413."
    )
    max_header_bytes: int = Field(
        60 * 1024, ge=1024, description="Largest request line + headers in bytes (Envoy's default); larger gets 431."
    )
    max_headers: int = Field(100, ge=8, description="Most header fields per request (Envoy's default); more gets 431.")
    header_timeout_s: float = Field(
        60.0, gt=0, description="Connection open or a request's first byte -> end of its headers, seconds "
        "(nginx client_header_timeout); later gets 408 and the connection closed."
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="Longest silence between two reads of a request body, seconds (nginx "
        "client_body_timeout); longer gets 408. Never applies to a response being streamed."
    )
    body_min_rate: int = Field(
        500, ge=0, description="Least average rate of a request body, bytes/s, from the end of its head, once it has "
        "been arriving for body_grace_s (Apache mod_reqtimeout body=20,MinRate=500); slower gets 408. Time the "
        "gateway holds the body back (flow control, 100 Continue not yet sent) does not count. 0: off."
    )
    body_grace_s: float = Field(
        20.0, gt=0, description="Seconds a request body may arrive before body_min_rate applies to it."
    )
    body_max_s: float = Field(
        0.0, ge=0, description="Longest a request body may take to arrive in all, seconds (time the gateway holds it "
        "back does not count); longer gets 408. 0: no cap."
    )
    keepalive_s: float = Field(
        5.0, gt=0, description="An idle keep-alive connection is closed after this, seconds (uvicorn's default; "
        "nginx keepalive_timeout is 75)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = Field(False, description="Log one line per request (uvicorn's access log).")
    processes: int = Field(
        1, ge=1, le=256,
        description="Gateway processes sharing the port (SO_REUSEPORT), about one core each; > 1 needs state.backend = redis.",
    )

    parse_offload_bytes: int = Field(
        1024 * 1024, ge=0,
        description="Request bodies larger than this (bytes) are parsed in a worker process, off the event loop "
        "(orjson holds the GIL, so a thread would not free it); 0: always parse inline (gateway/protocol/offload.py).",
    )
    parse_workers: int = Field(1, ge=1, le=16, description="Worker processes for off-loop parsing (per gateway process).")
    heavy_step_bytes: int = Field(
        16 * 1024, ge=0,
        description="Request bodies of at least this many bytes take their CPU-heavy steps (parse, prefix key and "
        "match, index insert) through the turn gate: at most heavy_turn_bytes of them per event-loop turn, first "
        "come first served, so long prompts cannot stall the loop for the requests beside them; 0: off "
        "(gateway/turns.py). Read at start-up.",
    )
    heavy_turn_bytes: int = Field(
        256 * 1024, ge=1, le=1 << 30,
        description="The heavy work one event-loop turn takes, as the bytes its steps cover (a parse or a scheduling "
        "step: the body; an index insert: the hashed blocks); the first step of a turn always runs. 256 KiB: one "
        "200 KB prompt's step per turn, or eight 32 KB ones. Read at start-up.",
    )

    cors_allow_origins: list[str] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) whose web pages may call the /v1/ APIs from a browser (CORS: "
        "preflights answered, kvgate's response headers exposed; gateway/api/cors.py), or [\"*\"] for any; "
        "[]: no CORS headers (browsers block cross-origin calls). Never covers /admin or /metrics. Read at start-up.",
    )

    @field_validator("cors_allow_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin == "*":
                continue
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or parts.fragment:
                raise ValueError(f"{origin!r} is not an origin: give scheme://host[:port] (no path, no trailing slash) or '*'")
        if "*" in value and len(value) > 1:
            raise ValueError("'*' allows any origin: list it alone")
        return value

    def is_loopback(self) -> bool:
        """True if ``host`` binds only a loopback interface (127.0.0.0/8, ::1 or localhost)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
