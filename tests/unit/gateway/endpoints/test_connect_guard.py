"""The pure parts of issue 17's SSRF fixes, table-driven: the gateway's own address, the connect-time
guard, endpoint URL validation and the redaction of URLs in messages and views."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from gateway.endpoints.allowlist import ConnectGuard, is_listener
from gateway.config import endpoint_url_problem, redact_url


@pytest.mark.parametrize(
    ("address", "port", "listeners", "is_self"),
    [
        ("127.0.0.1", 8080, [("127.0.0.1", 8080)], True),
        ("127.0.0.1", 8081, [("127.0.0.1", 8080)], False),
        ("127.0.0.2", 8080, [("127.0.0.1", 8080)], False),
        ("127.0.0.5", 8080, [("0.0.0.0", 8080)], True),  # unspecified: every local address
        ("127.0.0.1", 8080, [("localhost", 8080)], True),
        ("8.8.8.8", 8080, [("0.0.0.0", 8080)], False),
        ("::1", 8080, [("::", 8080)], True),
        ("10.1.2.3", 8080, [("gateway.internal", 8080)], False),  # a name: covered by the request's own address
    ],
)
def test_is_listener(address: str, port: int, listeners: list[tuple[str, int]], is_self: bool) -> None:
    assert is_listener(ipaddress.ip_address(address), port, listeners) is is_self


def _guard(urls: list[str], answers: dict[str, list[str]]) -> ConnectGuard:
    async def resolve(host: str, port: int) -> Sequence[str]:
        return answers[host]

    return ConnectGuard(lambda: urls, lambda: ["10.0.0.0/8"], resolve)


@pytest.mark.parametrize(
    ("host", "port", "answers", "expected"),
    [
        ("config.example", 80, {}, "config.example"),  # not an admin endpoint's origin: untouched
        ("admin.internal", 8000, {"admin.internal": ["10.1.1.1"]}, "10.1.1.1"),
        ("admin.internal", 8000, {"admin.internal": ["8.8.8.8", "10.1.1.2"]}, "10.1.1.2"),  # only allowed ones
        ("ADMIN.internal.", 8000, {"ADMIN.internal.": ["10.1.1.3"]}, "10.1.1.3"),  # case and root dot
        ("admin.internal", 8000, {"admin.internal": ["169.254.169.254"]}, None),
        ("10.9.9.9", 8000, {}, "10.9.9.9"),
        ("127.0.0.1", 8000, {}, None),
    ],
)
async def test_connect_guard(host: str, port: int, answers: dict[str, list[str]], expected: str | None) -> None:
    guard = _guard(["http://admin.internal:8000/v1", "http://10.9.9.9:8000/health", "http://127.0.0.1:8000/v1"], answers)
    if expected is None:
        with pytest.raises(OSError):
            await guard.address_for(host, port)
    else:
        assert await guard.address_for(host, port) == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://10.0.0.5:8000/v1", None),
        ("https://xn--caf-dma.example/v1", None),
        ("http://10.0.0.5:8000/v1/caf\u00e9", "ASCII"),
        ("http://10.0.0.5:8000/v1 ", "ASCII"),
        ("http://10.0.0.5:8000/\r\nX: y", "ASCII"),
        ("http://10.0.0.5:99999/v1", "not a valid URL"),
        ("ftp://10.0.0.5/v1", "http(s)"),
        ("http:///v1", "http(s)"),
    ],
)
def test_endpoint_url_problem(url: str, problem: str | None) -> None:
    found = endpoint_url_problem(url)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"),
        ("http://user:pw@10.0.0.5:8000/v1", "http://***@10.0.0.5:8000/v1"),
        ("https://tok@api.example/v1?key=abc&x=1&flag", "https://***@api.example/v1?key=***&x=***&***"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
