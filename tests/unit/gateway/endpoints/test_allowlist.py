"""The admin API's endpoint allow-list: URL shape and resolved addresses, table-driven."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.endpoints.allowlist import check_url, parse_networks
from gateway.errors import InvalidRequestError

NETWORKS = parse_networks(["127.0.0.0/8", "10.0.0.0/8", "::1/128"])
NAMES = {"vllm.internal": ["10.1.2.3"], "mixed.internal": ["10.1.2.3", "8.8.8.8"], "v6.internal": ["::1"]}


async def _resolve(host: str, port: int) -> Sequence[str]:
    if host not in NAMES:
        raise OSError("unknown host")
    return NAMES[host]


CASES = [
    # (id, url, accepted)
    ("loopback ip", "http://127.0.0.1:8000/v1", True),
    ("private ip", "https://10.9.8.7/v1", True),
    ("ipv6 loopback", "http://[::1]:8000/v1", True),
    ("name inside", "http://vllm.internal:8000/v1", True),
    ("ipv6 name", "http://v6.internal/v1", True),
    ("public ip", "http://8.8.8.8/v1", False),
    ("metadata service", "http://169.254.169.254/latest", False),
    ("one address outside", "http://mixed.internal/v1", False),
    ("does not resolve", "http://nowhere.example/v1", False),
    ("not http", "ftp://127.0.0.1/v1", False),
    ("no host", "http:///v1", False),
    ("user info", "http://user:pw@127.0.0.1/v1", False),
    ("query", "http://127.0.0.1/v1?x=1", False),
    ("bad port", "http://127.0.0.1:99999/v1", False),
]


@pytest.mark.parametrize(("url", "accepted"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_check_url(url: str, accepted: bool) -> None:
    if accepted:
        await check_url(url, NETWORKS, _resolve)
    else:
        with pytest.raises(InvalidRequestError) as refused:
            await check_url(url, NETWORKS, _resolve)
        assert refused.value.status == 400 and refused.value.param == "url"
