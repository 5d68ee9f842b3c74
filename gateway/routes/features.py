"""Prompt features for route selection: words, cue groups and coarse shape, all pure and cheap.

A prompt's text becomes a set of binary features (strings), read by the classifier
(``routes/classifier.py``) and shown in explanations:

* ``WORD``: each distinct lower-cased word (Unicode letters and digits; ``= ^ * / + < > %``
  count as words, so formulas leave a trace), and ``WORD WORD`` for adjacent pairs (words hold
  neither spaces nor colons, so the kinds of feature never collide);
* ``cue:GROUP``: a word or word pair from one of the cue lexicons below, in English and in
  Indonesian (our first users write both), with the usual Indonesian affixed forms listed
  explicitly (``buktikan``, ``membuktikan``, ``pembuktian``) instead of a stemmer:

  ============  ==================================================================
  ``proof``     prove, show that, induction, counterexample, buktikan, induksi ...
  ``math``      equation, integral, probability, remainder, persamaan, peluang ...
  ``code``      function, query, thread, sql, ``def``, fungsi, kode ...
  ``debug``     bug, crash, deadlock, leak, hang, wrong, galat, bocor ...
  ``plan``      plan, schedule, design, trade off, constraint, rencanakan, jadwalkan ...
  ``why``       why, justify, explain why, estimate, step by (step), mengapa, kenapa ...
  ``transform`` translate, summarize, rewrite, proofread, terjemahkan, ringkas ...
  ``create``    write, poem, caption, joke, name ideas, tulis, puisi, pantun ...
  ``chat``      hi, thanks, good night, halo, makasih, selamat malam ...
  ============  ==================================================================

* ``shape:...``: length bucket of the text (characters), how many numbers it holds, whether it
  asks a question, whether it carries a code block. Length is one weak feature among many; the
  labeled set is built so that it does not predict the label on its own (data/routing/README.md).

Cost: one regular-expression scan plus set operations done in C, about 10 us for a 100-character
prompt (``bench/route_select.py`` measures it). Long prompts are cut to their first
:data:`HEAD_CHARS` and last :data:`TAIL_CHARS` characters before scanning: the instruction is
almost always at one end.
"""

from __future__ import annotations

import re
HEAD_CHARS = 1200
TAIL_CHARS = 400

_TOKEN = re.compile(r"[^\W_]+|[=^*/+<>%]")
_NUMBER = re.compile(r"\d+")
_CODE_MARKS = ("```", "\n    ", "\n\t", "def ", "function ", "=>", "();", "select *")


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
        buktikan, membuktikan, pembuktian, bukti, induksi, tunjukkan bahwa, contoh penyangkal,
        buktikanlah""",
    "math": """solve, equation, equations, integral, limit, converge, converges, diverge, series,
        probability, chance, expected, remainder, divisible, factorial, prime, primes, recurrence,
        asymptotic, derivative, area, altitude, acceleration, speed, angle, percent, compounded,
        interest, geometric, arithmetic, sequence, real solutions, how many, how long, how much,
        how fast, selesaikan, penyelesaian, persamaan, peluang, probabilitas, sisa, habis dibagi,
        faktorial, prima, rekurens, turunan, luas, garis tinggi, percepatan, kecepatan, sudut,
        persen, bunga, barisan, deret, suku, berapa banyak, berapa lama, berapa peluang, hitung,
        hitunglah, menghitung, tentukan, carilah, stasioner, maksimum, minimum, kuadrat sempurna,
        bilangan bulat""",
    "code": """function, functions, code, query, sql, thread, threads, lock, locks, python, react, node,
        algorithm, complexity, array, arrays, linked list, graph, cache, database, api, server,
        def, return, select, join, implement, refactor, fungsi, kode, algoritma, kompleksitas,
        kueri, basis data, implementasikan""",
    "debug": """bug, bugs, crash, crashes, crashing, deadlock, hang, hangs, leak, leaks, wrong, breaks,
        fails, failing, infinite loop, error, errors, twice, duplicate, salah, galat, gagal,
        macet, bocor, dua kali, terlalu besar, sering salah, penyebabnya""",
    "plan": """plan, schedule, design, trade off, trade offs, tradeoffs, constraint, constraints,
        critical path, shortest, minimum number, optimal, budget, compare, weigh, migrate,
        rollback, roll back, strategy, rencanakan, rencana, jadwalkan, jadwal, rancang,
        rancanglah, desain, jalur kritis, tercepat, anggaran, bandingkan, timbang, rekomendasi,
        strategi""",
    "why": """why, explain why, reason, reasoning, justify, assumption, assumptions, estimate, step by,
        carefully, whether, confounders, significant, paradox, mengapa, kenapa, alasannya, alasan,
        asumsi, perkirakan, perkiraan, demi langkah, teliti, signifikan, faktor pengganggu,
        apakah ada, jelaskan kenapa, jelaskan mengapa""",
    "transform": """translate, translation, summarize, summary, summarise, tl, dr, rewrite, paraphrase,
        proofread, spelling, grammar, typos, shorten, reformat, convert, extract, pull out,
        list the, classify, label, sentiment, tone, alphabetical, markdown, csv, yaml, json,
        terjemahkan, terjemahin, terjemahan, ringkas, ringkasan, rangkum, intinya, tulis ulang,
        parafrasekan, parafrase, perbaiki tata, betulkan ejaan, ejaan, tata bahasa, salah ketik,
        persingkat, ubah, ambil, sebutkan, daftar, tandai, sentimen, suasana, abjad, rapikan,
        bahasa inggris, bahasa indonesia""",
    "create": """write, draft, poem, haiku, limerick, caption, tweet, post, slogan, name ideas, names,
        story, message, note, reply, title, birthday, tulis, tuliskan, buat, buatkan, puisi,
        pantun, postingan, ucapan, pesan, balasan, judul, ide nama, cerita""",
    "chat": """hi, hello, thanks, thank you, good night, good morning, joke, recommend, halo, hai,
        makasih, terima kasih, selamat malam, selamat pagi, apa kabar, lelucon, rekomendasikan""",
})
"""Cue word or word pair -> group."""


def clip(text: str) -> str:
    """The part of ``text`` that is scanned: all of it, or its head and tail."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def words(text: str) -> list[str]:
    """Words of ``text`` (already clipped and lower-cased)."""
    return _TOKEN.findall(text)


def _length_bucket(chars: int) -> str:
    for bound in (40, 120, 400, 1200):
        if chars < bound:
            return f"shape:len<{bound}"
    return "shape:len>=1200"


def shape(chars: int, lowered: str) -> list[str]:
    """Coarse shape: length bucket of the whole text, count of numbers, question, code marks."""
    numbers = len(_NUMBER.findall(lowered))
    out = [_length_bucket(chars), "shape:numbers=" + ("0" if numbers == 0 else "1-3" if numbers <= 3 else "4+")]
    if "?" in lowered:
        out.append("shape:question")
    if any(mark in lowered for mark in _CODE_MARKS):
        out.append("shape:code")
    return out


def cue_groups(words_and_pairs: set[str]) -> set[str]:
    """The cue groups present among a text's words and word pairs."""
    return {CUES[entry] for entry in CUES.keys() & words_and_pairs}


def featurize(text: str) -> set[str]:
    """Every binary feature of ``text`` (see the module docstring)."""
    lowered = clip(text).lower()
    tokens = words(lowered)
    features = set(tokens)
    features.update(map(" ".join, zip(tokens, tokens[1:])))
    features.update(["cue:" + group for group in cue_groups(features)])
    features.update(shape(len(text), lowered))
    return features
