"""Prefix hashing: a request's prompt -> canonical bytes -> fixed blocks -> chained 64-bit hashes.

Algorithm (the gateway-side analogue of vLLM's automatic prefix caching):

1. **Canonical serialization** (:func:`canonical_prompt`). Chat: the ``tools`` array first (chat
   templates render tool schemas at the top of the prompt), then every message as
   ``RS role US content [US name] [US tool_call_id] [US tool_calls]`` where RS = ``\\x1e`` and
   US = ``\\x1f``; a content list contributes each part's text, image URL or audio data (any other
   part as sorted-key JSON). Completions: the prompt string's UTF-8 bytes, or token ids packed as
   4-byte integers (then a block is exactly ``block_bytes / 4`` tokens). Every other field
   (sampling parameters, ``stream``, ...) is ignored: it does not change the prompt.
2. **Blocks**: the bytes are cut into blocks of ``block_bytes`` (default 256); only full blocks are
   hashed (as vLLM hashes only full KV blocks), at most ``max_blocks`` (default 1024, so at most
   256 KiB of prompt is hashed whatever its size). Only those bytes are serialized: a message
   past them contributes its length alone and a long ASCII content is sliced before it is
   encoded, so a 30 MiB prompt costs about what a 256 KiB one does (``bench/body_stall.py --stages``).
3. **Chain**: ``h_i = xxh3_64(block_i, seed=h_{i-1})`` with ``h_{-1} = xxh3_64(model, cache_salt)``,
   so one hash names the whole prefix up to its block, and two models or two ``cache_salt`` values
   never share a block (vLLM salts its first block with ``cache_salt`` too).
4. **Affinity**: ``prompt_cache_key`` (else ``user``) hashes to one extra key; an endpoint that
   served it recently gets the ``session`` scorer's vote even when the prompts differ.
5. **Memo** (:class:`ChainMemo`, CPU only, results unchanged): a chat prompt's head usually
   repeats (a tenant's system prompt; a conversation's previous turn), so after a request the
   chains of its block-aligned head (every message but the last) and of its whole prompt are kept
   under ``xxh3_128(those bytes, seed)``. The next request probes its own head and the message
   boundary before it (one xxh3 pass over the bytes each, about 20 GB/s) and chains only the blocks
   after a hit: an 8 KB system prompt plus a question costs 2-3 blocks instead of 32, a growing
   conversation only its new turn. Bounded by ``memo_hashes`` (default 262,144 hashes, about 10 MB).

The chain of step 3 runs in C where ``pip install`` built ``_chain.c`` (:data:`NATIVE_CHAIN`):
the same hashes (``tests/unit/gateway/prefix/test_native_chain.py`` compares it with
:func:`py_chain_hashes` on random data), about 8x less CPU for a long prompt.

Characters, not tokens (chosen by measurement, ``bench/prefix_hashing.py``): tokenizing a 32 KB
prompt costs milliseconds in Python (the simulator's regex tokenizer about 2.5 ms, a Hugging Face
fast tokenizer about 1 ms) while this whole function costs about 20 us of CPU with xxh3 without the
memo (blake2b: about 100 us, over the 50 us budget). Blocks of bytes are converted to tokens where the engine's
figures are needed, with a bytes-per-token ratio learned from reported usage
(``scheduling/feedback.py``). Text that is not ASCII makes blocks cover fewer characters; the ratio
absorbs that.
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import xxhash

from gateway.protocol.openai import InferenceRequest, Operation

_RS = b"\x1e"
_US = b"\x1f"
_SORTED = orjson.OPT_SORT_KEYS
_xxh3 = xxhash.xxh3_64_intdigest
_xxh3_128 = xxhash.xxh3_128_intdigest

DEFAULT_BLOCK_BYTES = 256
DEFAULT_MAX_BLOCKS = 1024


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class PrefixKey:
    """What routing needs to know about one prompt.

    Attributes:
        blocks: chained hashes of the prompt's full blocks, first block first.
        affinity: hash of ``prompt_cache_key`` (else ``user``), or None.
        length: canonical prompt length in bytes (blocks cover ``len(blocks) * block_bytes``).
        block_bytes: block size the hashes were cut with.
    """

    blocks: tuple[int, ...]
    affinity: int | None
    length: int
    block_bytes: int


def _part(part: Any) -> bytes:
    if isinstance(part, Mapping):
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            return part["text"].encode()
        image = part.get("image_url")
        if kind == "image_url" and isinstance(image, Mapping) and isinstance(image.get("url"), str):
            return _US + image["url"].encode()
        audio = part.get("input_audio")
        if kind == "input_audio" and isinstance(audio, Mapping) and isinstance(audio.get("data"), str):
            return _US + audio["data"].encode()
    return _US + orjson.dumps(part, option=_SORTED)


def _text_bytes(text: str, room: int) -> tuple[bytes, int]:
    """``(bytes, length)``: ``text``'s UTF-8 bytes (only their first ``room`` when longer) and the
    full byte length. An ASCII text (``str.isascii`` is O(1)) is sliced before it is encoded."""
    if len(text) <= room:
        data = text.encode()
        return data, len(data)
    if text.isascii():
        return text[:room].encode() if room > 0 else b"", len(text)
    data = text.encode()
    return data[:room] if len(data) > room else data, len(data)


def _message(message: Mapping[str, Any]) -> bytes:
    content = message.get("content")
    if isinstance(content, str):
        text = content.encode()
    elif isinstance(content, list):
        text = b"".join(_part(part) for part in content)
    else:
        text = b"" if content is None else orjson.dumps(content, option=_SORTED)
    out = _RS + str(message.get("role", "")).encode() + _US + text
    for name in ("name", "tool_call_id"):
        value = message.get(name)
        if value is not None:
            out += _US + str(value).encode()
    calls = message.get("tool_calls")
    if calls:
        out += _US + orjson.dumps(calls, option=_SORTED)
    return out


def _cut_message(message: Mapping[str, Any], room: int) -> tuple[bytes, int]:
    """A message whose string content is longer than ``room``: its first ``room`` canonical bytes
    (or more) and its full length, the content's rest not built (when ASCII)."""
    head = _RS + str(message.get("role", "")).encode() + _US
    text, length = _text_bytes(message["content"], max(room - len(head), 0))
    rest = len(_message({**message, "content": None})) - len(head) if len(message) > 2 else 0
    if length > len(text):  # the content was cut: what follows it lies past the bytes hashed
        return head + text, len(head) + length + rest
    whole = _message(message)
    return whole, len(whole)


def _prompt(prompt: Any) -> bytes:
    if isinstance(prompt, str):
        return prompt.encode()
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return array("I", prompt).tobytes()
    if isinstance(prompt, list):
        return _RS.join(_prompt(item) for item in prompt)
    return b""


def _parts(request: InferenceRequest, room: int = sys.maxsize) -> tuple[list[bytes], list[int]]:
    """The canonical prompt in pieces (the tools head, if any, then one piece per message) and each
    piece's full length. Joined, the pieces are the canonical prompt's first ``room`` bytes (or
    more) whatever its size: a piece past them is empty, a long message's content is cut
    (an ASCII one without encoding the rest), so a 30 MiB prompt costs what its head costs."""
    body = request.body
    if request.operation is not Operation.CHAT:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            data, length = _text_bytes(prompt, room)
            return [data], [length]
        data = _prompt(prompt)
        return [data], [len(data)]
    parts: list[bytes] = []
    lengths: list[int] = []
    tools = body.get("tools")
    if tools:
        data = b"\x1dtools" + _US + orjson.dumps(tools, option=_SORTED)
        parts.append(data)
        lengths.append(len(data))
        room -= len(data)
    for message in body.get("messages") or ():
        if room <= 0:  # past the bytes hashed: only the length counts
            parts.append(b"")
            lengths.append(_length(message))
            continue
        content = message.get("content")
        if isinstance(content, str) and len(content) > room:
            data, length = _cut_message(message, room)
            parts.append(data)
            lengths.append(length)
            room = room - len(data) if len(data) == length else 0  # after a cut piece only lengths count
            continue
        data = _message(message)  # the usual case: the whole message fits
        parts.append(data)
        lengths.append(len(data))
        room -= len(data)
    return parts, lengths


def _length(message: Mapping[str, Any]) -> int:
    """The canonical length of ``message`` (as :func:`_message` counts it), without building it
    when it is only an ASCII role and content (``str.isascii`` is O(1))."""
    if len(message) == 2:
        role, content = message.get("role"), message.get("content")
        if type(role) is str and type(content) is str and role.isascii() and content.isascii():
            return 2 + len(role) + len(content)
    return len(_message(message))


def canonical_prompt(request: InferenceRequest) -> bytes:
    """The canonical bytes of ``request``'s prompt (see the module docstring), all of them."""
    return b"".join(_parts(request)[0])


def py_chain_hashes(data: bytes, block_bytes: int, seed: int, max_blocks: int, start: int = 0) -> tuple[int, ...]:
    """Chained xxh3 hashes of the full ``block_bytes`` blocks of ``data`` (at most ``max_blocks``),
    from block ``start`` on (``seed`` is then the hash of block ``start - 1``): ints in
    ``[0, 2**64)``, first block first. The reference of :data:`chain_hashes`."""
    stop = min(len(data) // block_bytes, max_blocks) * block_bytes
    hashes = []
    append = hashes.append
    h = seed
    for offset in range(start * block_bytes, stop, block_bytes):
        # a bytes slice (a 256-byte copy) is cheaper to make and to hand to xxh3 than a memoryview
        h = _xxh3(data[offset : offset + block_bytes], h)
        append(h)
    return tuple(hashes)


try:
    from gateway.prefix._chain import chain_hashes as _native_chain_hashes
except ImportError:  # not built (no C compiler at install): the pure-Python one
    _native_chain_hashes = None

NATIVE_CHAIN = _native_chain_hashes is not None and os.environ.get("KVGATE_NATIVE_CHAIN", "1") != "0"
"""True when :data:`chain_hashes` is the C one (``_chain.c``); ``KVGATE_NATIVE_CHAIN=0`` picks the Python one."""
chain_hashes = _native_chain_hashes if NATIVE_CHAIN else py_chain_hashes
"""``chain_hashes(data, block_bytes, seed, max_blocks, start=0) -> tuple[int, ...]``, as
:func:`py_chain_hashes`: by default ``gateway.prefix._chain.chain_hashes`` (``_chain.c``, the same
xxh3 compiled in: one call per prompt instead of one per 256-byte block, 781 blocks of a 200 KB
prompt in ~40 us against ~300 us), where it was built."""


class ChainMemo:
    """Chains already computed, by the exact bytes of a block-aligned prompt head (see step 5).

    Keys are ``xxh3_128(head, seed)`` (the seed binds model and ``cache_salt``); values the head's
    chained hashes. Bounded by the number of hashes held (``max_hashes``), least recently used out
    first.
    """

    __slots__ = ("max_hashes", "_entries", "_held")

    def __init__(self, max_hashes: int = 262_144) -> None:
        self.max_hashes = max_hashes
        self._entries: dict[int, tuple[int, ...]] = {}
        self._held = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: int) -> tuple[int, ...] | None:
        """The memoized chain, refreshed as most recent (least recent out first)."""
        entries = self._entries
        found = entries.pop(key, None)
        if found is not None:
            entries[key] = found
        return found

    def put(self, key: int, hashes: tuple[int, ...]) -> None:
        entries = self._entries
        if key in entries or not hashes:
            return
        entries[key] = hashes
        self._held += len(hashes)
        while self._held > self.max_hashes and entries:
            self._held -= len(entries.pop(next(iter(entries))))


class PromptHasher:
    """Builds :class:`PrefixKey` objects; holds only its parameters, the seed cache and the chain memo."""

    __slots__ = ("block_bytes", "max_blocks", "_seeds", "_memo")

    def __init__(
        self, block_bytes: int = DEFAULT_BLOCK_BYTES, max_blocks: int = DEFAULT_MAX_BLOCKS, memo_hashes: int = 262_144,
    ) -> None:
        if block_bytes < 16 or max_blocks < 1:
            raise ValueError("block_bytes must be >= 16 and max_blocks >= 1")
        self.block_bytes = block_bytes
        self.max_blocks = max_blocks
        self._seeds: dict[tuple[str, str], int] = {}
        self._memo = ChainMemo(memo_hashes) if memo_hashes > 0 else None

    def seed(self, model: str, cache_salt: str = "") -> int:
        """The chain's seed for ``model`` and ``cache_salt`` (bounded memo of recent pairs)."""
        pair = (model, cache_salt)
        seed = self._seeds.get(pair)
        if seed is None:
            if len(self._seeds) >= 1024:
                self._seeds.clear()
            seed = self._seeds[pair] = _xxh3(b"kvgate\x00" + model.encode() + b"\x00" + cache_salt.encode())
        return seed

    def key(self, request: InferenceRequest, model: str) -> PrefixKey:
        """The prefix key of ``request`` for endpoints serving ``model``."""
        body = request.body
        salt = body.get("cache_salt")
        seed = self.seed(model, salt if isinstance(salt, str) else "")
        parts, lengths = _parts(request, self.block_bytes * self.max_blocks)
        data = b"".join(parts)
        length = sum(lengths)
        affinity_text = body.get("prompt_cache_key") or body.get("user")
        affinity = None
        if isinstance(affinity_text, str) and affinity_text:
            affinity = _xxh3(b"affinity\x00" + affinity_text.encode(), seed)
        if len(parts) < 2 or self._memo is None:
            blocks = chain_hashes(data, self.block_bytes, seed, self.max_blocks)
        else:
            blocks = self._memoized(data, length, lengths, seed)
        return PrefixKey(blocks, affinity, length, self.block_bytes)

    def _memoized(self, data: bytes, length: int, lengths: list[int], seed: int) -> tuple[int, ...]:
        """The chain, reusing a memoized head (step 5 of the module docstring); ``data`` holds at
        least the prompt's first ``min(length, block_bytes * max_blocks)`` bytes, ``lengths`` the
        full length of each piece."""
        block = self.block_bytes
        total = min(length // block, self.max_blocks)
        view = memoryview(data)
        memo = self._memo
        assert memo is not None
        head = length - lengths[-1]  # bytes before the last message
        previous = head - lengths[-2]  # ... and before the one before it
        known: tuple[int, ...] = ()
        probed: dict[int, int] = {}  # blocks -> memo key (a probe's key is reused to store)
        for boundary in (head, previous):
            count = min(boundary // block, total)
            if count <= 0:
                break
            probed[count] = probe = _xxh3_128(view[: count * block], seed)
            found = memo.get(probe)
            if found is not None:
                known = found
                break
        if known:
            blocks = known + chain_hashes(data, block, known[-1], self.max_blocks, len(known))
        else:
            blocks = chain_hashes(data, block, seed, self.max_blocks)
        for count in (min(head // block, total), total):
            if count > len(known):
                memo_key = probed.get(count)
                memo.put(_xxh3_128(view[: count * block], seed) if memo_key is None else memo_key, blocks[:count])
        return blocks
