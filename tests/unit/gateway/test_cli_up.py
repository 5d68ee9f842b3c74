import argparse
import socket

import pytest

from gateway.cli import LOCAL_MAX_MODEL_LEN, _check_port_free, up_settings
from gateway.settings import ConfigError


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
