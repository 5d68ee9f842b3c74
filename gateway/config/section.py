"""What every config section shares: the error, the frozen strict base model, and URL helpers.

:class:`ConfigError` is raised for any invalid configuration; :class:`Section` is the base of
every section (unknown keys are errors, values are immutable once validated).
"""

from __future__ import annotations

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
