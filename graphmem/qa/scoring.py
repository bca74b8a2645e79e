"""Answer scoring: normalised token F1 and exact match, with each benchmark's conventions explicit.

This module (with the judge) is where a predicted answer meets the gold answer and category.

Normalisation ``norm(s)``: lower-case; drop the punctuation characters of ``string.punctuation``
(commas included); drop the articles ``a``, ``an``, ``the``; collapse whitespace. ``tokens(s)``
splits ``norm(s)`` on whitespace.

* exact match        ``EM(p, g) = 1[norm(p) = norm(g)]``
* token F1           with ``P = tokens(p)``, ``G = tokens(g)`` as multisets and
                     ``c = |P ∩ G|`` (multiset intersection: each token counts ``min(n_P, n_G)`` times),
                     ``prec = c/|P|``, ``rec = c/|G|``, ``F1 = 2·prec·rec/(prec+rec)`` (0 when ``c = 0``);
                     two empty token lists score 1.
* closed-form guard  (``yes_no_guard``) when either normalised side is ``yes``, ``no`` or ``noanswer``,
                     F1 is 0 unless the two sides are equal (a "yes" must not earn partial credit).

Scoring rules, chosen per question category through an explicit map (:data:`CONVENTIONS`):

* ``token_f1``          F1 / EM of the whole answer.
* ``multi_answer_f1``   the gold is split on ``,`` into sub-answers ``g_1..g_m`` and the
                        prediction into ``p_1..p_n``; ``F1 = (1/m) Σ_i max_j F1(p_j, g_i)``
                        (partial credit per gold sub-answer); EM is 1 only when every ``g_i`` has an
                        exactly matching ``p_j``.
* ``first_alternative`` the gold is cut at its first ``;`` (the rest is a rationale) and scored
                        with ``token_f1``.
* ``abstention``        the question has no answer in the memory; the score (F1 and EM alike)
                        is 1 when the prediction abstains, i.e. its normalised text contains one
                        of the normalised abstention phrases, else 0. Reported apart from the other
                        categories.
* ``closed_form_f1``    ``token_f1`` with the yes/no guard.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

RULES = ("token_f1", "multi_answer_f1", "first_alternative", "abstention", "closed_form_f1")

# Category id (or name) -> rule, per dataset. Every category of a dataset must be listed: an
# unlisted category is an error, not a silent default.
CONVENTIONS: dict[str, dict[int | str, str]] = {
    "locomo": {1: "multi_answer_f1", 2: "token_f1", 3: "first_alternative", 4: "token_f1", 5: "abstention"},
    "hotpotqa": {"bridge": "closed_form_f1", "comparison": "closed_form_f1"},
}

# Phrases that mark an abstention (compared after normalisation, as substrings).
ABSTENTION_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_CLOSED = {"yes", "no", "noanswer"}


def normalize(text: str | None) -> str:
    """``norm(s)`` of the module docstring."""
    text = (text or "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def tokens(text: str | None) -> list[str]:
    return normalize(text).split()


def exact_match(prediction: str | None, gold: str | None) -> float:
    """``1[norm(p) = norm(g)]``."""
    return float(normalize(prediction) == normalize(gold))


def token_f1(prediction: str | None, gold: str | None, yes_no_guard: bool = False) -> float:
    """Multiset token F1 of ``prediction`` against ``gold`` (module docstring)."""
    p, g = tokens(prediction), tokens(gold)
    if yes_no_guard:
        np_, ng = " ".join(p), " ".join(g)
        if (np_ in _CLOSED or ng in _CLOSED) and np_ != ng:
            return 0.0
    if not p and not g:
        return 1.0
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _parts(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def multi_answer_f1(prediction: str | None, gold: str | None) -> tuple[float, float]:
    """``(F1, EM)`` with partial credit over comma-separated gold sub-answers (module docstring)."""
    golds, preds = _parts(gold), _parts(prediction) or [prediction or ""]
    if not golds:
        return token_f1(prediction, gold), exact_match(prediction, gold)
    f1 = sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)
    em = float(all(any(exact_match(p, g) for p in preds) for g in golds))
    return f1, em


def is_abstention(prediction: str | None, phrases: Sequence[str] = ABSTENTION_PHRASES) -> bool:
    """True when ``norm(prediction)`` contains one of the normalised ``phrases``."""
    text = normalize(prediction)
    return any(normalize(p) and normalize(p) in text for p in phrases)


@dataclass(frozen=True)
class Score:
    """The score of one answer: the rule applied, F1, EM, the gold as scored, whether it abstained."""

    rule: str
    f1: float
    em: float
    scored_gold: str | None
    abstained: bool

    def to_json(self) -> dict:
        return {
            "rule": self.rule,
            "f1": self.f1,
            "em": self.em,
            "scored_gold": self.scored_gold,
            "abstained": self.abstained,
        }


def rule_for(category: int | str, conventions: Mapping[int | str, str]) -> str:
    """The scoring rule of ``category``; a category missing from the map is an error."""
    rule = conventions.get(category)
    if rule is None and isinstance(category, str) and category.isdigit():
        rule = conventions.get(int(category))
    if rule is None:
        raise KeyError(
            f"no scoring rule for category {category!r}; the convention map covers {sorted(map(str, conventions))}"
        )
    if rule not in RULES:
        raise ValueError(f"unknown scoring rule {rule!r} for category {category!r}; known: {RULES}")
    return rule


def score_answer(
    prediction: str | None, gold: str | None, rule: str, abstention_phrases: Sequence[str] = ABSTENTION_PHRASES
) -> Score:
    """Apply ``rule`` (one of :data:`RULES`) to one prediction; a failed answer is ``None`` and scores 0."""
    abstained = prediction is not None and is_abstention(prediction, abstention_phrases)
    if rule == "abstention":
        hit = float(abstained)
        return Score(rule, hit, hit, None, abstained)
    if rule == "first_alternative":
        gold = (gold or "").split(";", 1)[0].strip()
    if prediction is None:
        return Score(rule, 0.0, 0.0, gold, False)
    if rule == "multi_answer_f1":
        f1, em = multi_answer_f1(prediction, gold)
    elif rule == "closed_form_f1":
        f1, em = token_f1(prediction, gold, yes_no_guard=True), exact_match(prediction, gold)
    elif rule in ("token_f1", "first_alternative"):
        f1, em = token_f1(prediction, gold), exact_match(prediction, gold)
    else:
        raise ValueError(f"unknown scoring rule {rule!r}; known: {RULES}")
    return Score(rule, f1, em, gold, abstained)


def conventions_for(dataset: str, override: Mapping[int | str, str] | None = None) -> dict[int | str, str]:
    """The category -> rule map of ``dataset``, or ``override`` when given (e.g. from the config)."""
    if override:
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): v for k, v in override.items()}
    if dataset not in CONVENTIONS:
        raise KeyError(
            f"no scoring conventions for dataset {dataset!r}; known: {sorted(CONVENTIONS)} "
            "(pass qa.scoring.conventions to define them)"
        )
    return dict(CONVENTIONS[dataset])
