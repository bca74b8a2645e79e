"""Labels for GraphMemory's evidence update from the outcome of one retrieval.

GraphMemory (§3, eq. 20-21) updates the Beta counters of the transitions a retrieval used: ``S_e += c`` for a
helpful transition, ``F_e += c`` for a harmful one, nothing for a neutral one, and never creates an edge. The
transitions are the edges the walk traversed (``u -> v``: the push that loaded ``v``); they form a forest
rooted at the entries. :func:`label_transitions` labels them from what an agent learns after it answered:

* ``helpful`` ids ``Y`` (the records that helped): ``u -> v`` is helpful when ``v ∈ Y``, harmful when no record
  of ``D(v)`` (``v`` and everything loaded below it in the forest) is in ``Y``, neutral otherwise (a helpful
  record lies below ``v``); confidence 1 (the oracle Reflector's rule, applied to whatever the agent names);
* a scalar ``reward`` ``r ∈ [0, 1]`` (an answer's score): every transition is helpful with confidence ``r`` and
  harmful with confidence ``1 - r``, so that ``S / (S + F)`` follows the mean reward of the retrievals that
  passed the edge.

What an answer tells, without any evidence label (:func:`answer_feedback`): with ``A`` the answer's distinct
tokens (:func:`answer_tokens`: the BM25 tokenizer's lowercased words without stop words) and ``T(v)`` the tokens
a record offers (:func:`node_offer`: its ``date_time`` / ``title`` metadata, then its text), the helpful records
of a retrieval are ``{v ∈ L : T(v) ∩ A ≠ ∅}`` and its reward is the answer's token recall in the loaded text,
``|A ∩ ∪_{v ∈ L} T(v)| / |A|`` (the walk trainer's ``answer`` reward, :mod:`rl.walk.rewards`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from graphmem.core.errors import InputError
from graphmem.core.graph import MemoryGraph
from graphmem.index.lexical import tokenize

FEEDBACK_LABELS = ("helpful", "harmful", "neutral")
MAX_ANSWER_TOKENS = 62  # answer tokens kept per question (one bit each of an int64 mask in rl.walk.rewards)
CONTEXT_FIELDS = ("date_time", "title")


class FeedbackError(InputError, ValueError):
    """Feedback that cannot be applied (both or neither of reward and helpful, a reward outside [0, 1])."""


def label_transitions(
    traversed: Sequence[Sequence[str]],
    *,
    reward: float | None = None,
    helpful: Sequence[str] | None = None,
) -> list[tuple[str, str, str, float]]:
    """``(source, target, label, confidence)`` for each traversed transition (module docstring); ``traversed``
    holds ``(source id, target id, ...)`` in traversal order."""
    if (reward is None) == (helpful is None):
        raise FeedbackError("feedback needs exactly one of 'reward' (a number in [0, 1]) and 'helpful' (ids)")
    pairs = [(str(t[0]), str(t[1])) for t in traversed]
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not 0.0 <= reward <= 1.0:
            raise FeedbackError(f"field 'reward' must be a number in [0, 1], got {reward!r}")
        if math.isnan(reward):
            raise FeedbackError("field 'reward' is NaN")
        out = []
        for u, v in pairs:
            out += [(u, v, "helpful", float(reward)), (u, v, "harmful", 1.0 - float(reward))]
        return out
    if isinstance(helpful, str) or not all(isinstance(i, str) for i in helpful):
        raise FeedbackError("field 'helpful' must be a list of record ids")
    good = set(helpful)
    children: dict[str, list[str]] = {}
    for u, v in pairs:
        children.setdefault(u, []).append(v)

    def below(v: str, seen: set[str]) -> bool:  # is a helpful record in D(v)?
        if v in good:
            return True
        seen.add(v)
        return any(below(w, seen) for w in children.get(v, ()) if w not in seen)

    out = []
    for u, v in pairs:
        label = "helpful" if v in good else ("neutral" if below(v, set()) else "harmful")
        out.append((u, v, label, 1.0))
    return out


def check_labels(labels: Sequence[Sequence]) -> list[tuple[str, str, str, float]]:
    """A Reflector's ``(source, target, label, confidence)`` transitions, checked: ids are strings, the label one
    of :data:`FEEDBACK_LABELS`, the confidence a number in [0, 1]; otherwise :class:`FeedbackError` naming it."""
    out = []
    for i, item in enumerate(labels):
        if not isinstance(item, (list, tuple)) or len(item) != 4:
            raise FeedbackError(f"labels[{i}] must be (source, target, label, confidence), got {item!r}")
        src, dst, label, c = item
        if not isinstance(src, str) or not isinstance(dst, str):
            raise FeedbackError(f"labels[{i}]: source and target must be record ids, got {src!r}, {dst!r}")
        if label not in FEEDBACK_LABELS:
            raise FeedbackError(f"labels[{i}]: label {label!r} is not one of {FEEDBACK_LABELS}")
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 <= c <= 1.0:
            raise FeedbackError(f"labels[{i}]: confidence {c!r} is not a number in [0, 1]")
        out.append((src, dst, label, float(c)))
    return out


# ---------------------------------------------------------------------------- feedback from an answer
def node_offer(graph: MemoryGraph, row: int) -> str:
    """The text a node offers an answer check: its ``date_time`` / ``title`` metadata, then its text."""
    meta = graph.metadata[row] or {}
    tags = " ".join(f"[{meta[f]}]" for f in CONTEXT_FIELDS if meta.get(f) not in (None, ""))
    return f"{tags} {graph.texts[row]}".strip()


def answer_tokens(answer: str | None) -> list[str]:
    """The distinct tokens ``A`` of an answer, in order, at most :data:`MAX_ANSWER_TOKENS`."""
    return list(dict.fromkeys(tokenize(answer or "")))[:MAX_ANSWER_TOKENS]


@dataclass(frozen=True)
class AnswerFeedback:
    """What an answer says of one loaded list (module docstring): the helpful records, in list order, and the
    answer's token recall in the loaded text (``None`` when the answer has no token)."""

    helpful: tuple[str, ...]
    recall: float | None


def answer_feedback(graph: MemoryGraph, loaded_ids: Sequence[str], answer: str | None) -> AnswerFeedback:
    """:class:`AnswerFeedback` of the records ``loaded_ids`` of ``graph`` for the reference ``answer``."""
    wanted = set(answer_tokens(answer))
    helpful, found = [], set()
    for nid in dict.fromkeys(loaded_ids):
        held = wanted.intersection(tokenize(node_offer(graph, graph.index_of(nid))))
        if held:
            helpful.append(nid)
            found |= held
    return AnswerFeedback(tuple(helpful), len(found) / len(wanted) if wanted else None)
