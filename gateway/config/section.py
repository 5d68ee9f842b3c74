"""What every config section shares: the error, the frozen strict base model, and URL helpers.

:class:`ConfigError` is raised for any invalid configuration; :class:`Section` is the base of
every section (unknown keys are errors, values are immutable once validated).
"""

from __future__ import annotations

import ipaddress
import re
import types
from typing import Annotated, Any, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

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


_PORT = re.compile(r"[1-9][0-9]{0,4}")
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_SCOPE = re.compile(r"[A-Za-z0-9_.-]+")
_TCP_FORM = "must be tcp://HOST:PORT (port 1-65535; IPv6 in brackets) or ipc://PATH"


def zmq_address_problem(address: str, *, wildcard: bool) -> str | None:
    """Why ``address`` cannot be a ZMQ endpoint of KV events, or None if it can.

    ``tcp://HOST:PORT`` with a port 1-65535 (no leading zero) and a host that is one of: a DNS
    name (RFC 1123: dot-separated labels of 1-63 letters, digits and hyphens, neither starting nor
    ending with a hyphen, 253 characters at most), an IPv4 address, a bracketed IPv6 address
    (as :class:`ipaddress.IPv6Address` reads it; a zone ``%NAME`` of letters, digits, ``_.-``), or
    ``*`` only where ``wildcard`` (a bind). Or ``ipc://PATH`` with a path. Printable ASCII
    without spaces. libzmq itself refuses few of the others, and only when the socket connects;
    most (``tcp://[.]:5601``) it accepts and then redials forever.
    """
    if not address.isascii() or not address.isprintable() or " " in address or len(address) > 1024:
        return "must be printable ASCII without spaces, at most 1024 characters"
    if address.startswith("ipc://"):
        return None if len(address) > len("ipc://") else "an ipc:// address needs a path"
    if not address.startswith("tcp://"):
        return _TCP_FORM
    host, colon, port = address[len("tcp://"):].rpartition(":")
    if not colon or not host or not _PORT.fullmatch(port) or int(port) > 65535:
        return _TCP_FORM
    if host == "*":
        return None if wildcard else "must name a concrete host (a wildcard is for binding)"
    return zmq_host_problem(host)


def zmq_host_problem(host: str) -> str | None:
    """Why ``host`` (of ``tcp://HOST:PORT``) is not a DNS name, an IPv4 or a bracketed IPv6
    address, or None (the rule of :func:`zmq_address_problem`)."""
    if host.startswith("[") or host.endswith("]"):
        inner = host[1:-1] if host.startswith("[") and host.endswith("]") else ""
        address, percent, scope = inner.partition("%")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return f"host {host!r} is not a valid IPv6 address"
        return None if not percent or _SCOPE.fullmatch(scope) else f"host {host!r}: a bad IPv6 zone"
    if all(char.isdigit() or char == "." for char in host):  # never a name (RFC 1123, 2.1): an IPv4 address
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"host {host!r} is not a valid IPv4 address"
        return None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in host.split(".")):
        return (f"host {host[:100]!r} is not a DNS name (RFC 1123: labels of 1-63 letters, digits and "
                "hyphens, not starting or ending with a hyphen, 253 characters in all), an IPv4 address "
                "or a bracketed IPv6 address")
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


def _is_number(annotation: Any) -> bool:
    """True for ``int`` and ``float``, alone, ``Annotated`` or in a union with None (``int | None``)."""
    if annotation in (int, float):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_number(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return bool(members) and all(_is_number(arg) for arg in members)
    return False


def boolean_for_number(annotation: Any, value: Any) -> str | None:
    """Why ``value`` cannot stand for ``annotation``: a boolean where it wants a number, or None.

    Pydantic's lax mode reads ``true`` as 1 for an ``int`` or ``float``; a config must not. Checks a
    number field (``int``, ``float``, optionally ``| None``) and the items of a ``list``/``tuple``
    or the values of a ``dict`` of numbers, optional (``| None``) too. A string (an environment variable) is left to pydantic.
    """
    if isinstance(value, bool):
        return f"must be a number, not a boolean (got {str(value).lower()})" if _is_number(annotation) else None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):  # ``dict[str, float] | None``: check against the container member
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:
            return boolean_for_number(members[0], value)
    if origin is Annotated:
        return boolean_for_number(args[0], value)
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        bad = [key for key, item in value.items() if isinstance(item, bool)]
        if bad and _is_number(args[1]):
            return f"values must be numbers, not booleans (got one for {bad[0]!r})"
    if origin in (list, tuple, set, frozenset) and args and isinstance(value, (list, tuple)):
        if any(isinstance(item, bool) for item in value) and all(_is_number(arg) for arg in args if arg is not Ellipsis):
            return "items must be numbers, not booleans"
    return None


class StrictNumbers(BaseModel):
    """A model whose number fields refuse booleans (``port = true`` is an error, not 1).

    Every other value, strings from ``KVGATE__*`` environment variables included, is validated by
    pydantic as before. Raises a validation error naming the field (``server.body_min_rate: must
    be a number, not a boolean (got true)`` once :class:`ConfigError` formats it).
    """

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        problem = boolean_for_number(field.annotation, value) if field is not None else None
        if problem:
            raise ValueError(problem)
        return value


class Section(StrictNumbers):
    """Base of every config section: unknown keys are errors; number fields refuse booleans; values are
    frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
