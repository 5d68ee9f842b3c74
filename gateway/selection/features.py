"""Request features for route selection: what is asked, what is supplied, what the request says.

A request becomes a set of binary features (strings), read by the classifier
(``selection/classifier.py``) and shown, with their weights, by the admin explain endpoint. They
describe the task, never the text's shape (no length buckets, no digit counts):

* **The ask** (:func:`split_ask`): the last user turn less what it supplies. Fenced code,
  tracebacks, tables, quoted or delimited blocks and long paragraphs are *supplied*; the
  ask is the shorter of the turn's first and last short block (``Summarize: <text>`` in one
  block: the part up to the colon); when every block is supplied, the ask is the first and last
  sentence. A pasted document's words therefore do not vote.
* ``WORD`` and ``WORD WORD``: the ask's lower-cased words (Unicode letters; ``= ^ * / + < > %``
  count as words, so formulas leave a trace) and adjacent pairs. Numbers are dropped, and so are
  function words of English and Indonesian (:data:`STOPWORDS`) on their own and in pairs of two.
* ``cue:GROUP``: a word or word pair of the ask from one of the cue lexicons (:data:`CUES`), in
  English and Indonesian, affixed forms listed explicitly (``buktikan``, ``membuktikan``);
  ``verb:GROUP``: the group of the ask's *first* cue, the request verb (``Write a letter to
  prove ...`` is ``verb:create``); ``cues:heavy`` (a cue of a heavy group), else ``cues:light``
  (only light groups, :data:`LIGHT_GROUPS`), else ``cues:none``; ``lead:WORD``: the ask's first
  word that is no function word (``what``, ``why``, ``tolong``: the kind of request).
* ``doc:KIND``: what is supplied (``code``, ``trace``, ``table``, ``prose``; ``doc:none``), and
  ``verb:GROUP+doc``: the request verb together with supplied material (summarize + document is
  light; why + traceback is not).
* ``ctx:MARK``: the context marks of ``selection/prompt.py`` (system prompt, earlier turns, a
  document in an earlier turn, tool results): presence only, never their words.
* ``req:...``: what the request body says: ``req:tools``, ``req:json`` (``response_format``
  json_object or json_schema), ``req:max_out<=512`` / ``req:max_out>=4096`` (the output cap).
  Explicit reasoning switches (``reasoning_effort``, thinking) decide before the classifier
  (``selection/policy.py``) and are no features.

Cost: a few C-level regular-expression passes over the last turn (bounded: a turn over
:data:`SCAN_CHARS` is read as its head and tail) and set operations over the ask's words,
tens of microseconds for a typical request and under 1 ms for a 1 MB one (``bench/route_select.py``
prints the measured figure).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

SCAN_CHARS = 16_000
"""A last turn longer than this is scanned as its first 12,000 and last 4,000 characters."""
ASK_BLOCK_CHARS = 320
"""A block of the last turn at least this long (or of 4 lines and 200 characters) is supplied material."""
SENTENCE_CHARS = 240

_TOKEN = re.compile(r"[^\W\d_]+|[=^*/+<>%]")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_QUOTED = re.compile(r'"""(.*?)(?:"""|\Z)|^-{3,}\s*$(.*?)(?:^-{3,}\s*$|\Z)', re.S | re.M)
_BLOCKS = re.compile(r"\n[ \t]*\n")
_TRACE = re.compile(r'\n(?:[ \t]+File "|[ \t]+at \S+\(|\w[\w.]*(?:Error|Exception)\b|fatal error:|goroutine \d)')
"""A traceback line; it starts with a newline so that the engine skips ahead to line starts."""
_SENTENCE_END = re.compile(r"[.?!:\n]")

STOPWORDS = frozenset("""
    a an the and or of to in on at by for with from as is are was were be been it its this that these those
    i me my you your we our us he she they them his her their there here so do does did am
    yang dan di ke dari ini itu dengan untuk pada adalah saya aku kamu anda kita kami ya dong nya sih
    juga atau akan ada oleh dalam para si pun lah kah
""".split())


def _lexicon(groups: dict[str, str]) -> dict[str, str]:
    """``{group: "entry, entry, ..."}`` -> ``{entry: group}``; an entry is one word or two."""
    table: dict[str, str] = {}
    for group, entries in groups.items():
        for entry in entries.split(","):
            entry = " ".join(entry.split())
            if entry and table.setdefault(entry, group) != group:
                raise ValueError(f"cue {entry!r} is in two groups")
    return table


CUES: dict[str, str] = _lexicon({
    "proof": """prove, proof, proves, rigorous, rigorously, induction, counterexample, show that, lemma,
        buktikan, membuktikan, pembuktian, induksi, tunjukkan bahwa, contoh penyangkal, buktikanlah""",
    "math": """solve, equation, equations, integral, converge, converges, diverge, series, probability,
        chance, expected, remainder, divisible, factorial, prime, primes, recurrence, asymptotic,
        derivative, compounded, geometric, arithmetic, real solutions, arrangements, ways, selesaikan,
        penyelesaian, persamaan, peluang, probabilitas, sisa pembagian, habis dibagi, faktorial, prima,
        rekurens, turunan, dimajemukkan, barisan, deret, kuadrat sempurna, bilangan bulat, susunan,
        angle, sudut, last digit, angka satuan, smallest, terkecil, largest, terbesar, trailing zeros""",
    "quant": """how many, how much, how long, how fast, when do, berapa, berapa banyak, berapa lama,
        hitung, hitunglah, menghitung, tentukan, carilah, percent, persen, rate, laju, twice, times as,
        dua kali, kali lipat, per day, per hari, cheaper, cheapest, termurah, lebih hemat""",
    "logic": """puzzle, riddle, brain teaser, teka teki, knights, knaves, ksatria, penipu, liar, lies,
        truth, who owns, siapa punya, weighings, menimbang, guards, penjaga, switches, saklar, urutannya,
        consecutive, berturut, berjajar, that right, benarkah, apakah benar, what if, bagaimana jika""",
    "code": """function, functions, code, query, sql, thread, threads, lock, locks, python, react, node,
        algorithm, complexity, array, arrays, linked list, graph, cache, database, api, server, def,
        implement, refactor, fungsi, kode, algoritma, kompleksitas, kueri, basis data, implementasikan""",
    "debug": """bug, bugs, crash, crashes, crashing, deadlock, hang, hangs, leak, leaks, wrong, breaks,
        fails, failing, infinite loop, root cause, race, intermittently, stuck, salah, galat, gagal,
        macet, bocor, penyebabnya, penyebab, race condition, debug, something is, is off,
        tests pass, intermittent, sesekali, kadang""",
    "plan": """plan, schedule, design, trade off, trade offs, tradeoffs, constraint, constraints,
        critical path, shortest, minimum number, optimal, budget, compare, weigh, migrate, rollback,
        roll back, strategy, allocate, prioritise, prioritize, rencanakan, rencana, jadwalkan, jadwal,
        rancang, rancanglah, desain, jalur kritis, tercepat, anggaran, bandingkan, timbang, rekomendasi,
        strategi, susun, atur, prioritas, rekomendasikan, consider, pertimbangkan, mending, worth,
        layak, should we, sebaiknya, lebih baik, is better, mana yang, choose, pilih, decide,
        putuskan""",
    "why": """why, explain why, reason, reasoning, justify, assumption, assumptions, estimate, step by,
        carefully, whether, confounders, significant, paradox, consequences, contradictions,
        implications, risk, risks, analyze, analyse, analysis, mengapa, kenapa, alasannya, alasan,
        asumsi, perkirakan, perkiraan, demi langkah, teliti, signifikan, faktor pengganggu, jelaskan
        kenapa, jelaskan mengapa, dampak, risiko, analisis, kontradiksi""",
    "transform": """translate, translation, summarize, summary, summarise, tl, dr, rewrite, paraphrase,
        rephrase, proofread, spelling, grammar, typos, shorten, condense, reformat, format, convert,
        extract, pull out, list the, classify, label, sentiment, tone, alphabetical, markdown, csv,
        yaml, json, sort, rename, docstrings, comments, terjemahkan, terjemahin, terjemahan,
        alihbahasakan, ringkas, ringkasan, rangkum, rangkuman, intinya, tulis ulang, parafrasekan,
        parafrase, perbaiki ejaan, ejaan, tata bahasa, salah ketik, persingkat, ubah, ambil, sebutkan,
        daftar, tandai, sentimen, klasifikasikan, label, abjad, rapikan, urutkan, format ulang, keluarkan,
        bahasa inggris, bahasa indonesia""",
    "create": """write, draft, poem, haiku, limerick, caption, tweet, post, slogan, name ideas, names,
        story, message, note, letter, reply, title, birthday, tulis, tuliskan, buat, buatkan, bikin,
        bikinin, puisi, pantun, postingan, ucapan, pesan, balasan, judul, ide nama, cerita, surat""",
    "chat": """hi, hello, thanks, thank you, good night, good morning, joke, recommend, anyway, halo,
        hai, makasih, terima kasih, selamat malam, selamat pagi, apa kabar, lelucon, btw, curhat""",
    "fact": """what is, what does, who wrote, who is, define, definition, meaning, stand for, capital,
        apa itu, apa arti, artinya, siapa, ibu kota, singkatan""",
})
"""Cue word or word pair -> group."""
LIGHT_GROUPS = frozenset({"transform", "create", "chat", "fact"})
"""Cue groups of light tasks; the others (proof, math, quant, logic, code, debug, plan, why) are heavy."""


def words(text: str) -> list[str]:
    """Words of ``text`` (already lower-cased), numbers left out."""
    return _TOKEN.findall(text)


def _supplied_kind(block: str) -> str | None:
    """``trace``, ``table`` or ``prose`` when ``block`` is supplied material, else None (part of the ask)."""
    if "Traceback (most recent" in block or _TRACE.search("\n" + block):
        return "trace"
    lines = block.count("\n") + 1
    if lines >= 3 and (block.count("|") >= 2 * lines or block.count("\t") >= lines or block.count(",") >= 2 * lines):
        return "table"
    if len(block) >= ASK_BLOCK_CHARS or (lines >= 4 and len(block) >= 200):
        return "prose"
    return None


def _edges(text: str) -> str:
    """The first sentence of ``text``, and its last unless the first ends with a colon (each at
    most :data:`SENTENCE_CHARS`)."""
    head = text[:SENTENCE_CHARS]
    cut = _SENTENCE_END.search(head)
    head = head[: cut.end()] if cut else head
    if head.endswith(":"):
        return head
    tail = text[-SENTENCE_CHARS:].rstrip()
    stops = [tail.rfind(mark, 0, len(tail) - 1) for mark in ".?!\n"]
    tail = tail[max(stops) + 1:] if max(stops) >= 0 else tail
    return head if tail in head else f"{head} {tail}"


def split_ask(text: str) -> tuple[str, set[str]]:
    """``(ask, kinds)``: the ask of a last user turn and the kinds of material it supplies."""
    if len(text) > SCAN_CHARS:
        text = text[:12_000] + "\n\n" + text[-4_000:]
    kinds: set[str] = set()
    if "```" in text:
        kinds.update("trace" if _supplied_kind(code) == "trace" else "code" for code in _FENCE.findall(text))
        text = _FENCE.sub("\n\n", text)
    if '"""' in text or "---" in text:
        stripped = _QUOTED.sub("\n\n", text)
        if stripped != text:
            kinds.add("prose")
            text = stripped
    blocks = [block.strip() for block in _BLOCKS.split(text)]
    blocks = [block for block in blocks if block]
    if not blocks:
        return "", kinds
    if len(blocks) > 2:  # the middle of a turn is what it supplies; the ask is at one end
        kinds.update(_supplied_kind(block) or "prose" for block in blocks[1:-1][:32])
        blocks = [blocks[0], blocks[-1]]
    candidates = []
    for block in blocks:
        kind = _supplied_kind(block)
        if kind is None:
            candidates.append(block)
        else:
            kinds.add(kind)
    if not candidates:
        return _edges(blocks[0] if len(blocks) == 1 else text.strip()), kinds
    if len(candidates) == 2:  # the shorter end, unless both are of a size and the longer reads more like a request
        short, long = sorted(candidates, key=len)
        kinds.add("prose")
        return (long if 2 * len(short) > len(long) and _asks(long) > _asks(short) else short), kinds
    ask = candidates[0]
    colon = _INLINE.search(ask, 0, 100)
    if colon and len(ask) >= 200 and len(ask) - colon.end() >= 120:  # "Summarize: <the text>"
        kinds.add("prose")
        return ask[: colon.start() + 1], kinds
    return ask, kinds


_INLINE = re.compile(r":\s")
_ADDRESS = re.compile(r"\?|\b(?:please|can you|could you|tolong|bisa|coba|help|bantu|pls)\b", re.I)


def _asks(block: str) -> int:
    """How much ``block`` reads like a request: a question mark or an address, and a cue word."""
    lowered = block.lower()
    return bool(_ADDRESS.search(lowered)) + bool(CUES.keys() & set(words(lowered)))


def _first_cue(tokens: list[str], cues: set[str]) -> str | None:
    """The earliest of ``cues`` in ``tokens`` (a word pair before the word it starts with)."""
    for i, token in enumerate(tokens):
        if i + 1 < len(tokens) and f"{token} {tokens[i + 1]}" in cues:
            return f"{token} {tokens[i + 1]}"
        if token in cues:
            return token
    return None


def ask_features(ask: str) -> set[str]:
    """Word, word-pair, cue and request-verb features of an ask (see the module docstring)."""
    tokens = words(ask.lower())
    pairs = [f"{a} {b}" for a, b in zip(tokens, tokens[1:]) if not (a in STOPWORDS and b in STOPWORDS)]
    features = {t for t in tokens if t not in STOPWORDS}
    features.update(pairs)
    cues = CUES.keys() & (features | set(tokens))
    features.update(["cue:" + CUES[entry] for entry in cues])
    groups = {CUES[entry] for entry in cues}
    features.add("cues:heavy" if groups - LIGHT_GROUPS else "cues:light" if groups else "cues:none")
    if cues:
        verb = _first_cue(tokens, cues)
        if verb is not None:
            features.add("verb:" + CUES[verb])
    lead = next((token for token in tokens if token not in STOPWORDS), None)
    if lead is not None:
        features.add("lead:" + lead)
    return features


def _cap_feature(cap: int | None) -> str | None:
    if cap is None:
        return None
    return "req:max_out<=512" if cap <= 512 else "req:max_out>=4096" if cap >= 4096 else None


def request_features(text: str, context: Iterable[str] = (), body: Mapping[str, Any] | None = None,
                     cap: int | None = None) -> set[str]:
    """Every feature of a request: its last user turn ``text``, the context marks of its
    :class:`~gateway.selection.prompt.PromptView`, its ``body`` (tools, JSON output) and output ``cap``."""
    ask, kinds = split_ask(text)
    features = ask_features(ask)
    if kinds:
        features.update("doc:" + kind for kind in kinds)
        features.update([f"{verb}+doc" for verb in features if verb.startswith("verb:")])
    else:
        features.add("doc:none")
    features.update("ctx:" + mark for mark in context)
    if body is not None:
        if body.get("tools") or body.get("functions"):
            features.add("req:tools")
        fmt = body.get("response_format")
        if isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object"):
            features.add("req:json")
    cap_feature = _cap_feature(cap)
    if cap_feature:
        features.add(cap_feature)
    return features


def featurize(text: str) -> set[str]:
    """The features of a request whose only message is the user turn ``text``."""
    return request_features(text)


def cue_groups(features: Iterable[str]) -> frozenset[str]:
    """The cue groups among ``features`` (``cue:GROUP`` -> ``GROUP``)."""
    return frozenset(feature[4:] for feature in features if feature.startswith("cue:"))
