"""Which URLs the admin API may add as endpoints: http(s) URLs whose host is on allowed networks.

An endpoint added at run time makes the gateway send requests (with the clients' prompts) to
that URL, so the admin API must not become a way to reach arbitrary hosts (server-side request
forgery). A URL is accepted when:

* it is ``http`` or ``https``, has a host, no user info, no query and no fragment;
* every address its host resolves to lies in one of ``admin.allowed_networks`` (CIDR; default
  loopback only). An IP literal is checked as is; a name is resolved once, at add time.

Names are resolved only when the endpoint is added; a DNS record changed later to point
elsewhere is not re-checked (DNS rebinding). Deployments that need that guarantee list endpoints
by IP address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

from gateway.errors import InvalidRequestError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def split_url(url: str, param: str = "url") -> tuple[str, int]:
    """(host, port) of an acceptable endpoint URL.

    Raises:
        InvalidRequestError: (400) not http(s), no host, user info, query or fragment.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidRequestError(f"'{param}' is not a valid URL.", param=param) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequestError(f"'{param}' must be an http(s) URL with a host.", param=param)
    if parts.username or parts.password or parts.query or parts.fragment:
        raise InvalidRequestError(f"'{param}' must not carry user info, a query or a fragment.", param=param)
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def disallowed(addresses: Iterable[Address], networks: Sequence[Network]) -> list[Address]:
    """The addresses that lie in none of ``networks``."""
    return [address for address in addresses if not any(address in network for network in networks)]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """Every address ``host`` resolves to (the event loop's getaddrinfo)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


async def check_url(url: str, networks: Sequence[Network], resolve: Resolver = system_resolver, param: str = "url") -> None:
    """Accept ``url`` or raise.

    Raises:
        InvalidRequestError: (400) malformed, unresolvable, or resolving outside ``networks``.
    """
    host, port = split_url(url, param)
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            resolved = await resolve(host, port)
        except OSError:
            raise InvalidRequestError(f"'{param}': host {host!r} does not resolve.", param=param) from None
        addresses = [ipaddress.ip_address(address.split("%", 1)[0]) for address in resolved]
    if not addresses:
        raise InvalidRequestError(f"'{param}': host {host!r} does not resolve.", param=param)
    outside = disallowed(addresses, networks)
    if outside:
        raise InvalidRequestError(
            f"'{param}': {host} resolves to {', '.join(map(str, outside))}, outside admin.allowed_networks.",
            param=param,
            code="endpoint_not_allowed",
        )
