"""[io] What a connect-mode KV-event socket is doing: its libzmq monitor's events folded into a state.

libzmq connects (and redials) in the background, so ``connect`` succeeding says nothing about the
worker: an address whose host does not resolve, or a port nothing listens on, is redialled
forever without a word. :class:`LinkState` folds the socket monitor's events (``zmq_socket_monitor``)
into one of :data:`STATES` and the last problem seen, for ``GET /admin/endpoints`` and the log;
:func:`watch` reads the monitor socket until cancelled. The fold is pure (event names in, no
``zmq`` needed) so it is tested without sockets.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("kvgate.kv_events")

STATES = ("connecting", "connected", "retrying", "disconnected", "refused", "stopped")
"""connecting: the socket is open, no connection yet; connected: the ZMTP handshake with the
publisher succeeded; retrying: a connection attempt failed, libzmq redials (``error`` says how);
disconnected: the publisher went away, libzmq redials; refused: libzmq refused the address itself
(not retried until it changes); stopped: the socket's reader ended on an error (resubscribed at
the next sync)."""

_NOT_STARTED = ("could not start a connection (the host does not resolve, or the network is unreachable); "
                "redialling")
_FAILED = "the connection failed (refused or timed out: is the worker's publisher bound there?); redialling"


class LinkState:
    """One connect-mode socket's state and last error (see :data:`STATES`)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.state = "connecting"
        self.error: str | None = None
        self._dialling = False  # a CONNECT_DELAYED came since the last outcome

    def event(self, name: str) -> None:
        """Fold one monitor event (``EVENT_*`` without the prefix: ``CONNECTED``, ``CONNECT_RETRIED`` ...)."""
        if name == "CONNECT_DELAYED":
            self._dialling = True
        elif name == "HANDSHAKE_SUCCEEDED" or (name == "CONNECTED" and self.state != "connected"):
            self.state, self.error = "connected", None
        elif name == "CONNECT_RETRIED":
            if self.state != "disconnected":
                self.state = "retrying"
                self.error = _FAILED if self._dialling else _NOT_STARTED
            self._dialling = False
        elif name == "DISCONNECTED" and self.state == "connected":
            self.state, self.error = "disconnected", "the publisher closed the connection (worker restarting?); redialling"
        elif name.startswith("HANDSHAKE_FAILED"):
            self.state, self.error = "retrying", "the ZMTP handshake failed (is a ZMQ publisher at this address?)"

    def refused(self, error: BaseException) -> None:
        self.state, self.error = "refused", f"libzmq refused the address: {error}"

    def stopped(self, error: BaseException) -> None:
        self.state, self.error = "stopped", f"the reader ended: {error!r}"

    def view(self) -> dict[str, Any]:
        return {"address": self.address, "state": self.state, "error": self.error}


def monitor(socket: Any) -> Any:
    """The monitor (PAIR) socket of ``socket`` for every event, or None where libzmq cannot give one."""
    try:
        return socket.get_monitor_socket()
    except Exception as error:  # zmq.ZMQError: then the state stays "connecting"
        log.warning("KV events: no socket monitor (%s); the admin view cannot say whether the worker is reached", error)
        return None


async def watch(monitor_socket: Any, link: LinkState, worker: str) -> None:
    """Fold the monitor's events into ``link`` until cancelled; logs each change of state."""
    import zmq
    from zmq.utils.monitor import parse_monitor_message

    names = {int(value): value.name for value in zmq.Event}
    try:
        while True:
            event = parse_monitor_message(await monitor_socket.recv_multipart())
            before = link.state
            link.event(names.get(int(event["event"]), ""))
            if link.state != before:
                level = logging.INFO if link.state == "connected" else logging.WARNING
                log.log(level, "KV events of %s at %s: %s%s", worker, link.address, link.state,
                        f" ({link.error})" if link.error else "")
    finally:
        monitor_socket.close(0)
