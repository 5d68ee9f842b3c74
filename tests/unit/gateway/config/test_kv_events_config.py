"""``[routing.kv_events]`` and the endpoints' ``kv_events`` at config load: each address's host is a
DNS name, an IPv4 or a bracketed IPv6 address (the key and the endpoint named), the bind is no
endpoint's publisher, and the combinations that run but not as meant are warned about."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, RoutingSettings, build_settings
from gateway.config.scheduling import same_zmq_socket
from gateway.config.section import zmq_address_problem


def _config(address: str, routing: dict[str, Any] | None = None, name: str | None = "w1") -> dict[str, Any]:
    endpoint = {"url": "http://10.0.0.9:8000/v1", "model": "m", "kv_events": address, **({"name": name} if name else {})}
    return {"clusters": {"onprem": {"endpoints": [endpoint]}}, "models": {"m": {"cluster": "onprem"}},
            "routing": routing or {}}


@pytest.mark.parametrize(("address", "message"), [
    ("tcp://[.]:5601", "host '[.]' is not a valid IPv6 address"),
    ("tcp://[1::2::3]:5601", "host '[1::2::3]' is not a valid IPv6 address"),
    ("tcp://[::1%]:5601", "host '[::1%]': a bad IPv6 zone"),
    ("tcp://-:5601", "host '-' is not a DNS name (RFC 1123"),
    ("tcp://a_b:5601", "host 'a_b' is not a DNS name"),
    ("tcp://a-.b:5601", "host 'a-.b' is not a DNS name"),
    ("tcp://" + "a" * 64 + ":5601", "is not a DNS name"),
    ("tcp://" + ".".join(["a" * 63] * 4) + ":5601", "is not a DNS name"),  # 255 characters
    ("tcp://999.1.1.1:5601", "host '999.1.1.1' is not a valid IPv4 address"),
    ("tcp://1.2.3:5601", "host '1.2.3' is not a valid IPv4 address"),
    ("tcp://w:05601", "must be tcp://HOST:PORT (port 1-65535"),
    ("tcp://w:65536", "must be tcp://HOST:PORT (port 1-65535"),
    ("udp://w:5601", "must be tcp://HOST:PORT"),
])
def test_a_bad_kv_events_host_or_port_is_a_config_error_naming_the_key_and_the_endpoint(address: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_settings(_config(address))
    text = str(caught.value)
    assert "clusters.onprem.endpoints.0.kv_events: endpoint 'w1': " in text and message in text, text
    assert repr(address[:100]) in text
    with pytest.raises(ConfigError, match=r"clusters\.onprem\.endpoints\.0\.kv_events: host '-'"):
        build_settings(_config("tcp://-:5601", name=None))  # unnamed: the key says which (onprem-0)


@pytest.mark.parametrize("address", [
    "tcp://w:5557", "tcp://worker-0.vllm.llm.svc.cluster.local:65535", "tcp://10.20.1.10:1", "tcp://[::1]:5557",
    "tcp://[2001:db8::7]:5557", "tcp://[::ffff:10.0.0.1]:5557", "tcp://[fe80::1%eth0]:5557", "ipc:///tmp/kv",
    "tcp://" + ".".join(["a" * 63] * 3 + ["a" * 61]) + ":1",  # 253 characters
])
def test_good_kv_events_addresses_load(address: str) -> None:
    assert build_settings(_config(address)).clusters["onprem"].endpoints[0].kv_events == address


def test_the_bind_follows_the_same_rule_and_may_be_a_wildcard() -> None:
    for good in ("tcp://*:5557", "tcp://0.0.0.0:5557", "tcp://[::]:5557", "tcp://127.0.0.1:5557", "ipc:///tmp/b", ""):
        assert RoutingSettings(kv_events={"bind": good}).kv_events.bind == good
    with pytest.raises(ValueError, match="host '-' is not a DNS name"):
        RoutingSettings(kv_events={"bind": "tcp://-:5557"})
    assert zmq_address_problem("tcp://*:5557", wildcard=False) == "must name a concrete host (a wildcard is for binding)"


@pytest.mark.parametrize(("bind", "address", "same"), [
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557", True),
    ("tcp://127.0.0.1:5557", "tcp://localhost:5557", True),
    ("tcp://*:5557", "tcp://127.0.0.1:5557", True),
    ("tcp://0.0.0.0:5557", "tcp://[::1]:5557", True),
    ("tcp://W0:5557", "tcp://w0:5557", True),
    ("ipc:///tmp/kv", "ipc:///tmp/kv", True),
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558", False),
    ("tcp://*:5557", "tcp://10.0.0.5:5557", False),  # another host, as far as the config can tell
    ("ipc:///tmp/kv", "tcp://127.0.0.1:5557", False),
])
def test_same_zmq_socket(bind: str, address: str, same: bool) -> None:
    assert same_zmq_socket(bind, address) is same


def test_a_bind_on_an_endpoint_publisher_is_refused_when_enabled() -> None:
    routing = {"policy": "prefix-precise", "kv_events": {"enabled": True}}  # the default bind: tcp://127.0.0.1:5557
    with pytest.raises(ConfigError) as caught:
        build_settings(_config("tcp://localhost:5557", routing))
    text = str(caught.value)
    assert ("routing.kv_events.bind: 'tcp://127.0.0.1:5557' is the socket of clusters.onprem.endpoints.0.kv_events "
            "('tcp://localhost:5557')") in text and 'Set bind = ""' in text, text
    assert build_settings(_config("tcp://localhost:5557", {**routing, "kv_events": {"enabled": True, "bind": ""}}))
    assert build_settings(_config("tcp://localhost:5557"))  # not enabled: the bind is never bound
    assert build_settings(_config("tcp://localhost:5558", routing))


def test_what_runs_but_not_as_meant_is_warned_about() -> None:
    def warnings(policy: str = "prefix-precise", addressed: int = 0, **events: Any) -> list[str]:
        return RoutingSettings(policy=policy, kv_events=events).kv_events_warnings(addressed)

    assert warnings() == ["routing.policy 'prefix-precise' scores by KV events but routing.kv_events.enabled is "
                          "false: every decision falls back to the approximate prefix index"]
    assert "(2 endpoint(s) have a kv_events address, not subscribed)" in warnings(addressed=2)[0]
    assert warnings("prefix-aware", 1) == ["1 endpoint(s) have a kv_events address but routing.kv_events.enabled "
                                           "is false: not subscribed"]
    assert warnings("prefix-aware", 0) == []
    assert warnings(enabled=True) == []  # the bind: workers connect to it (kvgate up)
    assert warnings(addressed=1, enabled=True, bind="") == []  # connect mode
    assert warnings(enabled=True, bind="") == [
        'routing.kv_events.enabled with bind = "" and no endpoint kv_events address: no KV events can arrive '
        "(until a reload adds an address); precise decisions use the approximate index"]
    unused = warnings("prefix-aware", 1, enabled=True)
    assert unused == ["routing.kv_events.enabled but routing.policy 'prefix-aware' has no precise-prefix scorer: "
                      'KV events are received and never used (policy = "prefix-precise" uses them)']
    custom = RoutingSettings(  # a profile of its own with the scorer under another name counts as precise
        policy="mine", plugins=[{"type": "precise-prefix", "name": "exact"}],
        profiles={"mine": {"producers": ["state", "tokenize"], "scorers": {"exact": 2.0}}}, kv_events={"enabled": True},
    )
    assert custom.is_precise() and custom.kv_events_warnings(1) == []
