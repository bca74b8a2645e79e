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
"""

from __future__ import annotations

import math
from typing import Sequence

from graphmem.core.errors import InputError

FEEDBACK_LABELS = ("helpful", "harmful", "neutral")


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
