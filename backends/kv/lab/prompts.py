"""The lab's prompt set: the shipped eval questions plus long inputs written for the lab.

Pure Python (no torch), so the gateway side can import it. Long inputs (:func:`long_tasks`) are
built deterministically from a few hand-written parts so that every answer depends on tokens far
back in the sequence:

- ``document``: a short briefing (a code, a name, a city) at the very start, then filler
  paragraphs up to about ``target_words`` words, then a question about the briefing;
- ``arithmetic``: a counter set in the first sentence and changed by steps spread through the
  text; the question asks for the final value (multi-step, each step depends on early tokens);
- ``logic``: ordering facts ("A is taller than B") spread through the text; the question asks
  for the extreme of the chain.

Sizes: 1,000 words of this prose is about 1,300 SmolLM2 tokens (the lab prints the real count).
The ``text`` of a task is the whole prompt; the perplexity studies score its last half.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FILLER = (
    "The harbour office opens at seven. Clerks sort the night's letters by district, stamp each "
    "one with the date, and carry the bundles to the long table under the east windows, where the "
    "runners wait with their satchels and argue about the weather and the price of bread.",
    "Along the canal the warehouses stand shoulder to shoulder. Their doors are painted in the "
    "colours of the old guilds: green for rope makers, brown for coopers, grey for the salt "
    "merchants. Most of the doors have not been repainted in forty years and the colours have faded.",
    "In winter the river freezes at the bend near the mill, and children skate there on Sundays "
    "while their parents sell roasted chestnuts from iron carts. The mill itself has been silent "
    "since the flood, but its wheel still turns slowly whenever the current is strong enough.",
    "The library keeps its ledgers in a room without windows. Each ledger is bound in cloth and "
    "numbered on the spine, and the librarian writes the number of every borrowed volume on a "
    "card that she files in a wooden drawer, alphabetically, by the surname of the borrower.",
    "Trains from the capital arrive twice a day, once before noon and once in the evening. The "
    "station master rings a brass bell when the first carriage comes into view, and the porters "
    "line up along the platform in the order in which they were hired, the oldest at the front.",
    "The market square is paved with uneven stones that were brought from the quarry on the hill. "
    "On market days the stalls are set out in rows, fish at the north end and cloth at the south, "
    "and the town crier reads the notices from the steps of the old customs house.",
    "Every spring the council debates whether to widen the bridge. Every spring the engineers "
    "present the same drawings, the merchants complain about the cost, and the matter is put off "
    "for another year, so the carts still wait their turn at both ends of the narrow span.",
    "The lighthouse keeper writes a short entry in his logbook each night: the wind, the sea, the "
    "ships he has seen. The entries are brief and almost always the same, yet the logbooks fill "
    "a whole shelf in the harbour office and nobody has ever thought of throwing one away.",
    "On the hill above the town there is an orchard of apple and pear trees. The fruit is picked "
    "in late summer by families who come from the villages, and the best of it is packed in straw "
    "and sent by cart to the station, where it is loaded onto the evening train.",
    "The school has four classrooms and one teacher for each. The children learn arithmetic in the "
    "morning and geography after lunch, and on Fridays they walk to the harbour to watch the "
    "ships being unloaded, which the teachers call a lesson in trade.",
)

CITIES = ("Lisbon", "Oslo", "Cairo", "Lima", "Hanoi", "Perth", "Dakar", "Quito")
NAMES = ("Marta", "Tomas", "Ingrid", "Pavel", "Amara", "Kenji", "Sofia", "Omar")
PEOPLE = ("Anna", "Ben", "Chloe", "David", "Elena")


@dataclass(frozen=True, slots=True)
class LongTask:
    """One long prompt: the whole text (ending in the question) and its accepted answers."""

    id: str
    kind: str
    text: str
    answers: tuple[str, ...]


def _filler(rng: random.Random, words: int) -> list[str]:
    """Filler paragraphs totalling at least ``words`` words, in a seeded order."""
    out: list[str] = []
    count = 0
    while count < words:
        paragraph = FILLER[rng.randrange(len(FILLER))]
        out.append(paragraph)
        count += len(paragraph.split())
    return out


def _interleave(facts: list[str], paragraphs: list[str], question: str) -> str:
    """Spread ``facts`` evenly through ``paragraphs`` (the first one first), then the question."""
    step = max(1, len(paragraphs) // max(1, len(facts)))
    body: list[str] = []
    for i, paragraph in enumerate(paragraphs):
        if i % step == 0 and i // step < len(facts):
            body.append(facts[i // step])
        body.append(paragraph)
    body.extend(facts[len(paragraphs[::step]):])
    body.append(question)
    return "\n\n".join(body)


def _document(rng: random.Random, n: int, words: int) -> LongTask:
    code, name, city = rng.randrange(1000, 9999), NAMES[n % len(NAMES)], CITIES[n % len(CITIES)]
    head = (f"Briefing. The vault code is {code}. The courier is {name}. The parcel goes to {city}. "
            "Remember these three facts.")
    question = rng.choice([("Question: What is the vault code? Answer: The vault code is", str(code)),
                           ("Question: Where does the parcel go? Answer: The parcel goes to", city),
                           ("Question: Who is the courier? Answer: The courier is", name)])
    text = _interleave([head], _filler(rng, words), question[0])
    return LongTask(f"document-{n}", "document", text, (question[1],))


def _arithmetic(rng: random.Random, n: int, words: int) -> LongTask:
    value = rng.randrange(2, 10)
    facts = [f"Note: a counter starts at {value}."]
    for _ in range(3):
        add = rng.randrange(1, 10)
        value += add
        facts.append(f"Note: add {add} to the counter.")
    text = _interleave(facts, _filler(rng, words),
                       "Question: What is the final value of the counter? Answer: The final value is")
    return LongTask(f"arithmetic-{n}", "arithmetic", text, (str(value),))


def _logic(rng: random.Random, n: int, words: int) -> LongTask:
    order = list(PEOPLE[:4])
    rng.shuffle(order)
    facts = [f"Note: {a} is taller than {b}." for a, b in zip(order, order[1:])]
    text = _interleave(facts, _filler(rng, words), "Question: Who is the tallest of them? Answer: The tallest is")
    return LongTask(f"logic-{n}", "logic", text, (order[0],))


def long_tasks(count: int = 6, target_words: int = 1000, seed: int = 0) -> list[LongTask]:
    """``count`` long tasks cycling document, arithmetic, logic; deterministic for a seed."""
    if count < 0 or target_words < 1:
        raise ValueError(f"long tasks: count >= 0 and target_words >= 1, got {count}, {target_words}")
    rng = random.Random(seed)
    makers = (_document, _arithmetic, _logic)
    return [makers[i % 3](rng, i, target_words) for i in range(count)]
