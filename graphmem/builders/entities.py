"""Entity extraction for entity edges: a pluggable interface and an offline cue-based extractor.

An extractor maps a list of texts to one set of normalised (lower-cased) entity strings per
text. Register another one (for example an LLM extractor following HAGE Appendix C.1) with
:func:`register_entity_extractor` and select it by name in the graph config.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Protocol, Sequence, runtime_checkable

from graphmem.core.registry import Registry


@runtime_checkable
class EntityExtractor(Protocol):
    """``extract(texts) -> list[set[str]]``, one set of entity strings per text."""

    name: str

    def extract(self, texts: Sequence[str]) -> list[set[str]]: ...


ENTITY_EXTRACTORS = Registry("entity extractor", lazy={"llm": "graphmem.llm.extractors"})
register_entity_extractor = ENTITY_EXTRACTORS.register


def make_entity_extractor(name: str, **kwargs) -> EntityExtractor:
    """Instantiate a registered extractor by name."""
    return ENTITY_EXTRACTORS.make(name, **kwargs)


# Function words, pronouns, interjections and other words that are capitalised at the start of a
# sentence without naming anything. General English, not tied to any dataset.
STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
let me more most my myself no nor not now of off on once only or other our ours ourselves out over
own same she should so some such than that the their theirs them themselves then there these they
this those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves yes yeah yep nope oh ok okay hey hi hello wow
thanks thank please sure well great good nice cool awesome amazing glad sorry bye goodbye right
really haha lol hmm um uh ah aww omg definitely absolutely totally exactly anyway btw congrats
congratulations totally though although however also maybe perhaps still even since would've
i'm i've i'd i'll you're you've you'd you'll he's she's it's we're we've they're they've that's
there's what's let's can't don't doesn't didn't isn't aren't wasn't weren't won't wouldn't
couldn't shouldn't mr mrs ms dr st last next sounds looks seems
""".split()
)

_UNITS = (
    r"%|percent|km|kms|kilometers?|kilometres?|miles?|mi|m|meters?|metres?|cm|mm|kg|kgs|g|grams?|lbs?"
    r"|pounds?|ft|feet|foot|inch(?:es)?|years?|yrs?|months?|weeks?|days?|hours?|hrs?|minutes?|mins?"
    r"|seconds?|secs?|dollars?|usd|euros?|eur|people|times|am|pm|k|million|billion"
)
_NUMBER_UNIT = re.compile(rf"(?<![\w.])(\$|€|£)?(\d+(?:[.,]\d+)*)\s*({_UNITS})?(?![\w])", re.IGNORECASE)
_YEAR = re.compile(r"^(1[5-9]|20)\d\d$")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'’&.-]*[A-Za-z0-9]|[A-Za-z]")
_SENTENCE_END = frozenset('.!?:;"“([')  # a word after one of these (and spaces) starts a sentence


def _clean(word: str) -> str:
    word = word.replace("’", "'")
    return word[:-2] if word.lower().endswith("'s") else word


def _sentence_initial(text: str, start: int) -> bool:
    """True when only whitespace precedes ``text[start]``, or the last non-space character before it is
    one of :data:`_SENTENCE_END`. Scans back over the whitespace just before ``start`` only, so over all
    the words of a text the scans read each character at most once (linear in the text)."""
    i = start
    while i > 0 and text[i - 1].isspace():
        i -= 1
    return i == 0 or text[i - 1] in _SENTENCE_END


@register_entity_extractor("offline")
class CueEntityExtractor:
    """Offline extractor from surface cues.

    Entities of a text are (1) maximal runs of capitalised words that are not stopwords, where a
    sentence-initial word counts only if the same word appears capitalised in a non-initial
    position somewhere in the batch of texts (the batch is the corpus vocabulary); (2) numbers
    with a unit or currency (``5 km``, ``$20``, ``3 years``) and four-digit years. All are
    lower-cased.

    Args:
        min_length: shortest entity string kept, in characters (default: 2).
    """

    def __init__(self, min_length: int = 2):
        self.min_length = min_length

    def _capitalised_runs(self, text: str) -> list[list[tuple[str, bool]]]:
        runs, current = [], []
        for m in _WORD.finditer(text):
            word = _clean(m.group())
            initial = _sentence_initial(text, m.start())
            gap = text[current[-1][2] : m.start()] if current else ""
            if word[:1].isupper() and word.lower() not in STOPWORDS:
                if current and gap.strip() not in ("", "-", "&"):
                    runs.append(current)
                    current = []
                current.append((word, initial, m.end()))
            elif current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
        return [[(w, i) for w, i, _ in run] for run in runs]

    @staticmethod
    def _proper(all_runs: Sequence[list[list[tuple[str, bool]]]]) -> set[str]:
        proper = {w.lower() for runs in all_runs for run in runs for w, initial in run if not initial}
        return proper | {w.lower() for runs in all_runs for run in runs if len(run) > 1 for w, _ in run}

    def proper_words(self, texts: Sequence[str]) -> set[str]:
        """The lower-cased words ``texts`` show as names wherever they stand: capitalised somewhere not at a
        sentence start, or inside a run of several capitalised words (the corpus vocabulary of :meth:`extract`)."""
        return self._proper([self._capitalised_runs(t) for t in texts])

    def extract(self, texts: Sequence[str], known: AbstractSet[str] = frozenset()) -> list[set[str]]:
        """Entities of each text, the batch of ``texts`` plus the ``known`` proper words as the vocabulary
        (the :meth:`proper_words` of texts seen before; :meth:`extract_arriving` is the one-text form a live
        memory uses)."""
        all_runs = [self._capitalised_runs(t) for t in texts]
        proper = self._proper(all_runs)
        return [self._entities(text, runs, proper, known) for text, runs in zip(texts, all_runs)]

    def extract_arriving(self, text: str, known: AbstractSet[str]) -> tuple[set[str], set[str]]:
        """``(extract([text], known)[0], proper_words([text]))`` from one pass over ``text``; ``known`` is only
        looked up, never copied, so an add to a live memory costs the same whatever its vocabulary holds."""
        runs = self._capitalised_runs(text)
        proper = self._proper([runs])
        return self._entities(text, runs, proper, known), proper

    def _entities(
        self, text: str, runs: list[list[tuple[str, bool]]], proper: AbstractSet[str], known: AbstractSet[str]
    ) -> set[str]:
        """The entities of ``text`` from its capitalised ``runs``; a sentence-initial word is a name when its lower
        case is in ``proper`` (the batch's vocabulary) or in ``known``."""

        def named(word: str) -> bool:
            lower = word.lower()
            return lower in proper or lower in known

        found: set[str] = set()
        for run in runs:
            words = [w for w, initial in run if not initial or named(w)]
            if words and run[0][1] and not named(run[0][0]):
                words = [w for w, _ in run[1:]] if len(run) > 1 else []
            if words:
                found.add(" ".join(words).lower())
        for m in _NUMBER_UNIT.finditer(text):
            currency, number, unit = m.groups()
            if currency or unit:
                found.add(f"{currency or ''}{number}{' ' + unit.lower() if unit else ''}")
            elif _YEAR.match(number):
                found.add(number)
        return {e for e in found if len(e) >= self.min_length}


def extract_in_order(extractor: EntityExtractor, texts: Sequence[str]) -> list[set[str]]:
    """Entities of each text as a live memory extracts them, one text at a time in order: text ``i`` with the
    proper words of texts ``0..i`` as its vocabulary (an extractor with :meth:`CueEntityExtractor.proper_words`),
    or by itself (any other extractor)."""
    known: set[str] = set()
    out = []
    for text in texts:
        entities, words = extract_one(extractor, text, known)
        known |= words
        out.append(entities)
    return out


def extract_one(extractor: EntityExtractor, text: str, known: AbstractSet[str]) -> tuple[set[str], set[str]]:
    """The entities of one arriving ``text`` with the proper words ``known`` from the texts before it, and the
    proper words the text adds to that vocabulary (none for an extractor without a vocabulary)."""
    if isinstance(extractor, CueEntityExtractor):
        return extractor.extract_arriving(text, known)
    return set(extractor.extract([text])[0]), set()


_WORD = re.compile(r"\w+")


def link_mentions(texts: Sequence[str], entities: Sequence[set[str]]) -> list[set[str]]:
    """Entity linking by mention: each text keeps its own ``entities`` and gains every entity of their union
    whose words (``\\w+``, lower-cased) occur in the text as a consecutive run, so an entity written for one
    fragment also anchors every other fragment that names it. Entities without a word are never linked."""
    keys = _word_keys(set().union(*entities) if entities else ())
    lengths = sorted({len(k) for k in keys})
    return [set(own) | _named(text, keys, lengths) for text, own in zip(texts, entities, strict=True)]


def ground_mentions(texts: Sequence[str], entities: Sequence[set[str]]) -> list[set[str]]:
    """Each text keeps only those of its ``entities`` that it names (their words a consecutive run of its words,
    as :func:`link_mentions` matches them): an entity written for a fragment that does not name it is dropped."""
    out = []
    for text, own in zip(texts, entities, strict=True):
        keys = _word_keys(own)
        out.append(_named(text, keys, sorted({len(k) for k in keys})) if keys else set())
    return out


def _word_keys(entities) -> dict[tuple[str, ...], set[str]]:
    """The entities by their lower-cased words (``\\w+``); entities without a word are left out."""
    keys: dict[tuple[str, ...], set[str]] = {}
    for entity in entities:
        if words := tuple(_WORD.findall(entity.lower())):
            keys.setdefault(words, set()).add(entity)
    return keys


def _named(text: str, keys: dict[tuple[str, ...], set[str]], lengths: Sequence[int]) -> set[str]:
    """The entities of ``keys`` whose words occur in ``text`` as a consecutive run (runs of the given ``lengths``)."""
    words, found = _WORD.findall(text.lower()), set()
    for n in lengths:
        for i in range(len(words) - n + 1):
            if (hit := keys.get(tuple(words[i : i + n]))) is not None:
                found |= hit
    return found
