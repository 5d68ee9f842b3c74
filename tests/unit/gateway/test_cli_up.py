import argparse
import socket

import pytest

from gateway.cli import LOCAL_MAX_MODEL_LEN, _check_port_free, up_settings
from gateway.config import ConfigError


def test_a_taken_port_fails_fast() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--port {port}"):
            _check_port_free("127.0.0.1", port)


def test_up_settings_know_the_local_context_length() -> None:
    args = argparse.Namespace(host="127.0.0.1", port=8123)
    settings = up_settings(args, [], "smollm2")
    assert settings.clusters["fast"].max_context_tokens == LOCAL_MAX_MODEL_LEN
    assert settings.models["smollm2"].aliases == ["default"]


def test_fixed_mmap_threshold_is_accepted_by_glibc() -> None:
    import sys

    from gateway.cli import fixed_mmap_threshold

    if not sys.platform.startswith("linux"):
        assert fixed_mmap_threshold() is False
    else:
        assert fixed_mmap_threshold() is True  # mallopt returns 1 on success (glibc)


def test_up_turns_the_console_on_for_loopback_and_prints_its_url_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.cli import _snippet, console_key

    monkeypatch.delenv("KVGATE__ADMIN__API_KEY", raising=False)
    assert console_key("0.0.0.0") is None and console_key("10.1.2.3") is None
    key = console_key("127.0.0.1")
    assert key is not None and len(key) >= 32 and key != console_key("localhost")  # fresh for each run
    args = argparse.Namespace(host="127.0.0.1", port=8123)
    settings = up_settings(args, [], "smollm2", key)
    assert settings.admin.api_key is not None and settings.admin.api_key.get_secret_value() == key
    ready = _snippet(settings, "smollm2", key)
    lines = ready.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("kvgate is ready"))
    assert lines[at + 1] == f"console: http://127.0.0.1:8123/admin/console  (admin key for this run: {key})"
    # an operator's own key wins and is not printed; without any key there is no console line
    monkeypatch.setenv("KVGATE__ADMIN__API_KEY", "operator-secret")
    own = up_settings(args, [], "smollm2", key)
    assert own.admin.api_key is not None and own.admin.api_key.get_secret_value() == "operator-secret"
    assert "operator-secret" not in _snippet(own, "smollm2", key) and "KVGATE__ADMIN__API_KEY" in _snippet(own, "smollm2", key)
    monkeypatch.delenv("KVGATE__ADMIN__API_KEY")
    assert "console" not in _snippet(up_settings(args, [], "smollm2"), "smollm2")


def test_a_signal_repeated_at_once_is_the_same_stop_and_a_later_one_forces_exit() -> None:
    """GNU make forwards a group SIGTERM to its child: ``make run`` gets it twice at once (a fresh-clone
    trial saw the forced exit skip the lifespan's shutdown). A repeat within REPEAT_GRACE_S is one stop."""
    import uvicorn

    from gateway.api.serving import REPEAT_GRACE_S
    from gateway.cli import _new_server

    server = _new_server(uvicorn.Config(app=lambda scope, receive, send: None))
    now = [100.0]
    server.clock = lambda: now[0]
    server.request_exit()
    assert server.should_exit and not server.force_exit
    now[0] += REPEAT_GRACE_S / 10
    server.request_exit()  # make's forwarded copy of the same SIGTERM
    assert not server.force_exit
    now[0] += REPEAT_GRACE_S
    server.request_exit()  # the operator, again: force it
    assert server.force_exit
