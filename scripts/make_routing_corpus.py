"""Write ``data/routing/requests.jsonl``: the labeled route-selection corpus, from templates, seeded.

    .venv/bin/python scripts/make_routing_corpus.py [--seed 20] [--variants 5]

Every template of ``scripts/routing_corpus/`` (``light.py``, ``heavy.py``) yields ``--variants`` requests, each with
its slots filled afresh and wrapped the way production traffic arrives: alone, under a
product's system prompt, after earlier turns, with a document, table, code or traceback pasted
before or after the ask (or in an earlier turn), with tool definitions, in JSON mode, with an
output cap or an explicit reasoning switch. The 357 hand-written prompts of
``data/routing/prompts.jsonl`` join as single-message requests (source ``seed``).

Splits (``data/routing/README.md``): ``test_cross`` holds every item made from a held-out
template, and only those items use the held-out documents, code and system prompts, so its
style differs from training; ``test_in`` is a random 15% of the other items; the rest is
``train``. The ``tricky`` flag is computed here with the two fixed rules of :func:`tricky`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from routing_corpus import material  # noqa: E402
from routing_corpus.asks import HISTORY, TASKS, Task  # noqa: E402

NAMES = ["Ayu", "Budi", "Citra", "Dimas", "Eka", "Fajar", "Gita", "Hana", "Irfan", "Joko", "Maria", "Tom",
         "Priya", "Kenji", "Laura", "Omar", "Sinta", "Wulan", "Yusuf", "Rina"]
CITIES = ["Jakarta", "Bandung", "Surabaya", "Yogyakarta", "Medan", "Makassar", "Semarang", "Malang", "Denpasar",
          "Singapore", "Kuala Lumpur", "Lisbon", "Osaka", "Melbourne"]
PRODUCTS = ["AirNest purifier", "Kopiku grinder", "TrailMate bottle", "PixelDesk lamp", "SnapCharge power bank",
            "Lumo smart plug", "Rimba backpack", "Sora earbuds"]
COUNTRIES = ["Kenya", "Peru", "Vietnam", "Norway", "Chile", "Canada", "Mongolia", "Portugal"]
WORDS = ["BANANA", "MISSISSIPPI", "KOPI", "STATISTICS", "JAKARTA", "COMMITTEE"]
MONTHS = ["March", "April", "May", "June", "Juli", "Agustus", "September", "Oktober"]
SENT_EN = ["the meeting moved to Thursday", "please keep the receipt", "the train is late again",
           "I'll call you when I land", "the shop closes early on Fridays", "can I pay by card?"]
SENT_ID = ["saya sudah sampai di stasiun", "tolong simpan struknya", "besok libur nasional",
           "harganya sudah termasuk ongkir", "aku telat karena hujan", "boleh bayar pakai QRIS?"]
BIG = [391, 437, 561, 589, 667, 713, 851, 899, 901, 1001, 1147, 1369, 1763, 2021, 2027, 2029, 3127, 4087, 7919, 9991]

REASONING_WORDS = ("prove", "proof", "why", "how many", "how long", "calculate", "compute", "solve", "debug",
                   "bug", "error", "optimal", "plan", "step by step", "probability", "estimate", "analy",
                   "buktikan", "mengapa", "kenapa", "hitung", "berapa", "tentukan", "selesaikan", "rencanakan",
                   "peluang", "analisis", "perkirakan", "jelaskan")
"""The keyword rule of :func:`tricky` (a substring of the last user turn, lower-cased)."""
LENGTH_RULE_CHARS = 600
"""The length rule of :func:`tricky`: reasoning when all messages together reach this many characters."""


def slots(rng: random.Random) -> dict[str, object]:
    names = rng.sample(NAMES, 3)
    cities = rng.sample(CITIES, 2)
    return {
        "name": names[0], "name2": names[1], "name3": names[2], "city": cities[0], "city2": cities[1],
        "product": rng.choice(PRODUCTS), "country": rng.choice(COUNTRIES), "word": rng.choice(WORDS),
        "day": rng.randint(2, 28), "month": rng.choice(MONTHS), "big": rng.choice(BIG),
        "sentence_en": rng.choice(SENT_EN), "sentence_id": rng.choice(SENT_ID),
        "n1": rng.randint(2, 9), "n2": rng.randint(20, 300), "n3": rng.randint(5, 60), "n4": rng.randint(2, 9),
        "n5": rng.randint(100, 999), "n6": rng.randint(1000, 9999),
    }


def fill(text: str, table: dict[str, object]) -> str:
    out = text
    for key, value in table.items():
        out = out.replace("{" + key + "}", str(value))
    return out


def document(task: Task, lang: str, rng: random.Random, held: bool) -> str:
    if task.material == "table":
        return material.table(rng, "id" if lang == "id" else "en", held)[1]
    if task.material == "code":
        language, snippet = material.code(rng, held)
        return f"```{language}\n{snippet}```"
    if task.material == "trace":
        parts = [material.trace(rng, held)]
        if rng.random() < 0.6:
            language, snippet = material.code(rng, held)
            parts.insert(rng.randint(0, 1), f"```{language}\n{snippet}```")
        return "\n\n".join(parts)
    doc_lang = "id" if lang == "id" else "en"
    if task.name == "translate" and rng.random() < 0.7:
        doc_lang = "en" if doc_lang == "id" else "id"
    if lang == "mx":
        doc_lang = rng.choice(["en", "id"])
    return material.prose(rng, doc_lang, held)[1]


def with_document(ask: str, doc: str, rng: random.Random, messages: list[dict]) -> str:
    """The last user turn holding ``ask`` and ``doc`` (or ``doc`` in an earlier turn of ``messages``)."""
    style = rng.random()
    if style < 0.35:
        return f"{ask}\n\n{doc}"
    if style < 0.6:
        return f"{doc}\n\n{ask}"
    if style < 0.75:
        return f'{ask}\n"""\n{doc}\n"""'
    if style < 0.85:
        return f"{ask}: {doc}" if "\n" not in doc[:200] else f"{ask}\n---\n{doc}\n---"
    intro = rng.choice(["Here's the text:", "Ini teksnya:", "Context below.", "For reference:", "Dokumen:"])
    messages.append({"role": "user", "content": f"{intro}\n\n{doc}"})
    messages.append({"role": "assistant", "content": rng.choice(
        ["Got it. What would you like me to do with it?", "Oke, sudah saya baca. Mau diapakan?", "Thanks, ready."])})
    return ask


def history(rng: random.Random, messages: list[dict], turns: int) -> None:
    for user, assistant in (pair[1:] for pair in rng.sample(HISTORY, turns)):
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def build(task: Task, lang: str, text: str, rng: random.Random, held: bool) -> dict:
    table = slots(rng)
    ask = fill(text, table)
    body: dict = {"model": "auto"}
    messages: list[dict] = []
    if rng.random() < (0.7 if task.material == "tools" else 0.45):
        messages.append({"role": "system", "content": material.system(rng, held)[1]})
    if task.material == "history":
        history(rng, messages, rng.randint(1, 3))
    elif task.material in ("prose", "table", "code", "trace"):
        ask = with_document(ask, fill(document(task, lang, rng, held), table), rng, messages)
    elif task.material == "chat":
        chat = fill(material.chitchat(rng, "id" if lang == "id" else "en"), table)
        if rng.random() < 0.7:
            ask = f"{chat} {ask}"
        else:
            messages += [{"role": "user", "content": chat},
                         {"role": "assistant", "content": "That sounds like a lot! Tell me more."}]
    elif rng.random() < 0.3:
        history(rng, messages, rng.randint(1, 2))
    if task.material == "tools":
        body["tools"] = material.tools(rng)
    if task.json_mode:
        body["response_format"] = {"type": "json_object"}
    messages.append({"role": "user", "content": ask})
    body["messages"] = messages
    roll = rng.random()
    if roll < 0.05:
        body["reasoning_effort"] = rng.choice(["low", "medium", "high"] if task.needs_reasoning else ["minimal", "none"])
    elif roll < 0.3:
        body["max_completion_tokens" if rng.random() < 0.6 else "max_tokens"] = rng.choice([256, 512, 1024, 2048, 4096, 8192])
    return body


def last_user(body: dict) -> str:
    return next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")


def tricky(body: dict, label: bool) -> bool:
    """A length rule or a keyword rule gets the item wrong (the constants above)."""
    chars = sum(len(m["content"]) for m in body["messages"])
    by_length = chars >= LENGTH_RULE_CHARS
    text = last_user(body).lower()
    by_keyword = any(word in text for word in REASONING_WORDS)
    return by_length != label or by_keyword != label


def seed_rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        body = {"model": "auto", "messages": [{"role": "user", "content": row["prompt"]}]}
        rows.append({"id": f"seed-{row['id']}", "lang": row["lang"], "needs_reasoning": row["needs_reasoning"],
                     "tricky": tricky(body, row["needs_reasoning"]), "task": row["category"], "source": "seed",
                     "split": "train" if row["split"] == "train" else "test_in", "request": body})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--variants", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "data/routing/requests.jsonl")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    rows = seed_rows(ROOT / "data/routing/prompts.jsonl")
    for task in TASKS:
        position: dict[str, int] = {}
        for lang, text in task.templates:
            index = position[lang] = position.get(lang, -1) + 1
            held = index % 4 == 3 if lang != "mx" else index % 2 == 1
            for variant in range(args.variants):
                body = build(task, lang, text, rng, held)
                split = "test_cross" if held else ("test_in" if rng.random() < 0.15 else "train")
                rows.append({"id": f"{task.name}-{lang}{index}-{variant}", "lang": {"mx": "mixed"}.get(lang, lang),
                             "needs_reasoning": task.needs_reasoning, "tricky": tricky(body, task.needs_reasoning),
                             "task": task.name, "source": f"{task.name}/{lang}{index}", "split": split, "request": body})
    with args.out.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {len(rows)} requests", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
