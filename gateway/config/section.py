"""What every config section shares: the error, the frozen strict base model, and URL helpers.

:class:`ConfigError` is raised for any invalid configuration; :class:`Section` is the base of
every section (unknown keys are errors, values are immutable once validated).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

MiB = 1024 * 1024


class ConfigError(ValueError):
    """The configuration is invalid; the message names every bad key (dotted path)."""


def endpoint_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint's URL (or health URL), or None if it can.

    An endpoint URL is ``http`` or ``https``, has a host and a valid port, and is printable
    ASCII: a request line and a ``Host`` header carry it as is, so anything else (a raw
    non-ASCII byte, a space or a control character) must be percent-encoded (RFC 3986; an
    internationalised host name in its ``xn--`` form).
    """
    if not url.isascii() or not url.isprintable() or " " in url:
        return "must be printable ASCII (percent-encode other characters, RFC 3986)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL with a host"
    return None


_ZMQ_TCP = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+|\*):([0-9]{1,5})")


def zmq_address_problem(address: str, *, wildcard: bool) -> str | None:
    """Why ``address`` cannot be a ZMQ endpoint of KV events, or None if it can.

    ``tcp://HOST:PORT`` (a name, an IPv4 address or a bracketed IPv6 one; ``*`` only where
    ``wildcard``: a bind) with a port 1-65535, or ``ipc://PATH`` with a path; printable ASCII
    without spaces (libzmq refuses anything else only when the socket connects).
    """
    if not address.isascii() or not address.isprintable() or " " in address or len(address) > 1024:
        return "must be printable ASCII without spaces, at most 1024 characters"
    if address.startswith("ipc://"):
        return None if len(address) > len("ipc://") else "an ipc:// address needs a path"
    match = _ZMQ_TCP.fullmatch(address)
    if match is None or not 1 <= int(match.group(2)) <= 65535:
        return "must be tcp://HOST:PORT (port 1-65535; IPv6 in brackets) or ipc://PATH"
    if match.group(1) == "*" and not wildcard:
        return "must name a concrete host (a wildcard is for binding)"
    return None


def redact_url(url: str) -> str:
    """``url`` safe to show in messages and views: user info and query values become ``***``.

    ``http://user:secret@host/v1?token=abc`` -> ``http://***@host/v1?token=***``. A value that
    does not parse as a URL is cut to its scheme and ``...``.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split(":", 1)[0] + ":..."
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        (item.split("=", 1)[0] + "=***") if "=" in item else "***" for item in parts.query.split("&")
    ) if parts.query else ""
    return parts._replace(netloc=netloc, query=query).geturl()


class Section(BaseModel):
    """Base of every config section: unknown keys are errors; values are frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
