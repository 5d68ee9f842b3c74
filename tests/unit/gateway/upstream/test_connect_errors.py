"""The reason a failed connect gives clients (``gateway/upstream/client.py``, ``os_error_detail``)."""

import errno
import socket

import pytest

from gateway.upstream.client import os_error_detail


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "name resolution failed: Name or service not known"),
        (socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
         "name resolution failed: Temporary failure in name resolution"),
        (socket.gaierror(), "name resolution failed: unknown error"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('10.0.0.1', 8000)"), "Connection refused"),
        (OSError(errno.ENETUNREACH, "x"), "Network is unreachable"),
        (ConnectionResetError(), "ConnectionResetError"),
    ],
)
def test_a_connect_failure_reads_as_its_reason_never_the_address(error: OSError, expected: str) -> None:
    assert os_error_detail(error) == expected
