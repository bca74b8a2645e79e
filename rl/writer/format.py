"""The writer's output format: prompts with position anchors, triple parsing, format scores.

A writer prompt lists the fragments of a task under *position labels* ``[F1] .. [Fk]`` (not their
graph ids) and the writer cites them the same way, one triple per line:

    (head | relation | tail) [Fi]

:func:`parse_triples` maps a label back to the fragment id in code (``Fi`` -> ``fragment_ids[i-1]``),
so the anchor is a closed vocabulary of ``k`` short labels instead of an arbitrary id the model
must copy character by character. A line is *valid* when it parses and its label is one of
``F1 .. Fk``; a completion is :func:`well_formed` when it has a non-empty line and every non-empty
line is valid.

A completion *cut* by the token limit (``cut=True``: it filled ``max_completion_length`` without ending) loses
its last line when that line is not a valid triple: the unfinished line is the budget's doing, so it is left
out of the judged lines (and counted apart, :func:`judged_lines`) rather than scored as a malformed one.
"""

from __future__ import annotations

import re
from typing import Sequence

_SLOT = r"\s*([^|()\[\]\s][^|()\[\]]*?)\s*"  # a non-blank head, relation or tail
LOOSE_TRIPLE_RE = re.compile(rf"^\s*\({_SLOT}\|{_SLOT}\|{_SLOT}\)")
TRIPLE_RE = re.compile(rf"^\s*\({_SLOT}\|{_SLOT}\|{_SLOT}\)\s*\[\s*([^\[\]\s]+)\s*\]\s*$")

PROMPT_HEAD = (
    "Extract knowledge triples from the memory fragments. Write one per line as\n"
    "(head | relation | tail) [fragment label]\nfor example: (Alice | adopted | a puppy) [F3]\nFragments:\n"
)


def anchor_label(position: int) -> str:
    """The label of the fragment at 0-based ``position`` in the prompt: ``F1``, ``F2``, ..."""
    return f"F{position + 1}"


def anchor_map(fragment_ids: Sequence[str]) -> dict[str, str]:
    """``{label: fragment id}`` for the fragments of one prompt, in prompt order."""
    return {anchor_label(i): f for i, f in enumerate(fragment_ids)}


def render_prompt(texts: Sequence[str], max_chars: int = 200) -> str:
    """The writer prompt over ``texts`` (in order), each cut to ``max_chars`` and labelled ``[Fi]``."""
    lines = [f"[{anchor_label(i)}] {t[:max_chars]}" for i, t in enumerate(texts)]
    return PROMPT_HEAD + "\n".join(lines) + "\nTriples:\n"


def judged_lines(text: str, cut: bool = False) -> tuple[list[str], int]:
    """``(lines, dropped)``: the non-empty lines of ``text``, less the last one when the completion was ``cut``
    and that line is not a complete anchored triple (``dropped`` = 1 then, else 0)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if cut and lines and not TRIPLE_RE.match(lines[-1]):
        return lines[:-1], 1
    return lines, 0


def parse_triples(
    text: str, fragment_ids: Sequence[str], cut: bool = False
) -> tuple[list[tuple[str, str, str, str]], int, int]:
    """``(triples, valid_lines, judged_lines)`` over :func:`judged_lines` (``cut``: the token limit ended it).

    A line is valid when it matches ``(head | relation | tail) [Fi]`` with ``1 <= i <= k``; its triple
    is ``(head, relation, tail, fragment_ids[i-1])`` with head, relation, tail lower-cased and their
    spaces collapsed.
    """
    labels = anchor_map(fragment_ids)
    triples, good, total = [], 0, 0
    for line in judged_lines(text, cut)[0]:
        total += 1
        m = TRIPLE_RE.match(line)
        if m and m.group(4) in labels:
            good += 1
            triples.append(tuple(" ".join(g.lower().split()) for g in m.groups()[:3]) + (labels[m.group(4)],))
    return triples, good, total


def format_score(text: str, fragment_ids: Sequence[str], partial: float = 0.5, cut: bool = False) -> float:
    """``r_fmt`` = mean line credit over the :func:`judged_lines` (0 for none).

    Credit 1 for a valid line, ``partial`` for an anchored triple whose label is not ``F1 .. Fk``,
    ``partial / 2`` for ``(head | relation | tail)`` without an anchor, 0 otherwise.
    """
    labels = anchor_map(fragment_ids)
    credits = []
    for line in judged_lines(text, cut)[0]:
        m = TRIPLE_RE.match(line)
        if m:
            credits.append(1.0 if m.group(4) in labels else partial)
        else:
            credits.append(partial / 2 if LOOSE_TRIPLE_RE.match(line) else 0.0)
    return sum(credits) / len(credits) if credits else 0.0


def well_formed(text: str, fragment_ids: Sequence[str], cut: bool = False) -> bool:
    """At least one judged line, and every judged line a valid anchored triple (:func:`judged_lines`)."""
    _, good, total = parse_triples(text, fragment_ids, cut)
    return total > 0 and good == total


def repetition_rate(triples: Sequence[tuple]) -> float:
    """``ρ_rep = (|T| - |uniq(T)|) / |T|`` (0 for no triples)."""
    return (len(triples) - len(set(triples))) / len(triples) if triples else 0.0


def clean_entity(entity: str) -> str:
    """An entity string made safe for a triple slot: no ``| ( ) [ ]``, single spaces."""
    for ch in "|()[]":
        entity = entity.replace(ch, " ")
    return " ".join(entity.split())
