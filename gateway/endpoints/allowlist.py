"""Which URLs the admin API may add as endpoints: http(s) URLs whose host is on allowed networks.

An endpoint added at run time makes the gateway send requests (with the clients' prompts) to
that URL, so the admin API must not become a way to reach arbitrary hosts (server-side request
forgery). A URL is accepted when:

* it is printable ASCII (anything else percent-encoded), ``http`` or ``https``, has a host, no
  user info, no query and no fragment;
* every address its host resolves to lies in one of ``admin.allowed_networks`` (CIDR; default
  loopback only). An IP literal is checked as is; a name is resolved once, at add time.

* it is not the gateway itself: no address it resolves to is, with its port, the address the
  admin request came in on or ``server.host``/``server.port`` (an unspecified ``server.host``
  such as ``0.0.0.0`` means every local address), which would make every request loop back.

The check is repeated on the address actually connected to (:class:`ConnectGuard`): for an
endpoint added through the admin API, each new connection resolves the name once, keeps only the
addresses inside ``admin.allowed_networks`` and connects to one of those, so a DNS record changed
after registration (DNS rebinding) cannot point the gateway elsewhere. No kvgate HTTP client
follows redirects, so an allowed endpoint cannot send the gateway on to another address either.
Endpoints from the config file and managed workers are the operator's and are not restricted.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from gateway.errors import InvalidRequestError
from gateway.config import endpoint_url_problem

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def split_url(url: str, param: str = "url") -> tuple[str, int]:
    """(host, port) of an acceptable endpoint URL.

    Raises:
        InvalidRequestError: (400) not printable ASCII (``endpoint_url_problem``), not http(s), no
            host, user info, query or fragment.
    """
    problem = endpoint_url_problem(url)
    if problem is not None and not problem.startswith("must be an http"):
        raise InvalidRequestError(f"'{param}' {problem}.", param=param)
    parts = urlsplit(url)
    port = parts.port
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


def is_local_address(address: Address) -> bool:
    """True if ``address`` belongs to this host (loopback, unspecified, or bindable here)."""
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))  # only an address of one of this host's interfaces binds
    except OSError:
        return False
    return True


def is_listener(address: Address, port: int, listeners: Iterable[tuple[str, int]]) -> bool:
    """True if ``(address, port)`` reaches one of ``listeners`` (``(host, port)`` the gateway listens on)."""
    for host, listen_port in listeners:
        if port != listen_port:
            continue
        if host == "localhost":
            if address.is_loopback:
                return True
            continue
        try:
            listen = ipaddress.ip_address(host.split("%", 1)[0]) if host else ipaddress.ip_address("0.0.0.0")
        except ValueError:
            continue  # another name: the address the admin request came in on covers it
        if address == listen or (listen.is_unspecified and is_local_address(address)):
            return True
    return False


async def check_url(
    url: str,
    networks: Sequence[Network],
    resolve: Resolver = system_resolver,
    param: str = "url",
    listeners: Iterable[tuple[str, int]] = (),
) -> None:
    """Accept ``url`` or raise.

    Args:
        listeners: ``(host, port)`` pairs the gateway listens on; an endpoint reaching one is refused.

    Raises:
        InvalidRequestError: (400) malformed, unresolvable, resolving outside ``networks``, or
            the gateway itself (code ``endpoint_is_gateway``).
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
    listeners = list(listeners)
    if any(is_listener(address, port, listeners) for address in addresses):
        raise InvalidRequestError(
            f"'{param}': {host}:{port} is this gateway's own address; an endpoint must be another server.",
            param=param,
            code="endpoint_is_gateway",
        )


def _origin(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname or "").rstrip(".").lower(), port


class ConnectGuard:
    """``admin.allowed_networks`` applied to the address actually connected to.

    An origin (host, port) of an endpoint added through the admin API is *restricted*: a new
    connection to it resolves the host once (``resolve``), keeps the addresses inside the
    networks and connects to one of those (see the module doc). Other origins are not touched.
    Consulted once per new connection, never per request on a pooled connection.

    Args:
        restricted_urls: the URLs (base and health URLs) of the admin-added endpoints, now.
        networks: the CIDRs of ``admin.allowed_networks``, now (a reload may change them).
        resolve: host name -> addresses (default: the system resolver).
    """

    def __init__(
        self,
        restricted_urls: Callable[[], Iterable[str]],
        networks: Callable[[], Sequence[str]],
        resolve: Resolver = system_resolver,
    ) -> None:
        self._restricted_urls = restricted_urls
        self._networks = networks
        self._parsed: tuple[tuple[str, ...], tuple[Network, ...]] = ((), ())
        self.resolve = resolve

    def restricted(self, host: str, port: int) -> bool:
        """Whether connections to ``host:port`` must stay inside the networks."""
        origin = (host.rstrip(".").lower(), port)
        return any(_origin(url) == origin for url in self._restricted_urls())

    def permits(self, address: str) -> bool:
        """Whether ``address`` lies inside ``admin.allowed_networks``."""
        cidrs = tuple(self._networks())
        if self._parsed[0] != cidrs:
            self._parsed = (cidrs, parse_networks(cidrs))
        try:
            parsed = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        return not disallowed([parsed], self._parsed[1])

    async def address_for(self, host: str, port: int) -> str:
        """What to connect to for ``host:port``: ``host`` itself if unrestricted, else an allowed address.

        Raises:
            OSError: (EACCES) every address of a restricted host lies outside the networks.
        """
        if not self.restricted(host, port):
            return host
        try:
            candidates = [str(ipaddress.ip_address(host))]
        except ValueError:
            candidates = list(await self.resolve(host, port))
        for address in candidates:
            if self.permits(address):
                return address
        raise OSError(errno.EACCES, "address outside admin.allowed_networks")


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver with :class:`ConnectGuard` applied (aiohttp connects only to what it returns).

    aiohttp does not call a resolver for an IP-literal host; such an origin was checked when the
    endpoint was added and cannot move.
    """

    def __init__(self, guard: ConnectGuard) -> None:
        self._guard = guard
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if not self._guard.restricted(host, port):
            return await self._inner.resolve(host, port, family)
        address = await self._guard.address_for(host, port)
        version = ipaddress.ip_address(address).version
        result: Any = {
            "hostname": host, "host": address, "port": port, "proto": 0, "flags": socket.AI_NUMERICHOST,
            "family": socket.AF_INET6 if version == 6 else socket.AF_INET,
        }
        return [result]

    async def close(self) -> None:
        await self._inner.close()
