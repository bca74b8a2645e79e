"""LLM-as-a-judge with HAGE's Appendix C.3 rubric: a continuous score in [0, 1] per answer.

The judge sees the question, the reference (gold) answer and the generated response, each in its
own delimited block; it never sees the question category or the retrieved context. It scores
semantic agreement — entities, temporal markers, causal relations, correctness, missing
constraints — and replies ``{"score": s, "reason": ...}`` with ``s ∈ [0, 1]``.

Its model is configured apart from the answer model and must run at temperature 0. Judging
with the same model (and endpoint) that produced the answers is refused unless explicitly
allowed (:func:`check_judge_config`), because a model grading itself is biased.

Parsing: the ``score`` of the first JSON object in the reply that has one; else the value of a ``score: s``
pattern; else the first percentage ``p%`` (as ``p/100``); else the first standalone ``0``, ``1``, ``0.x`` or
``1.0`` in the text (small local models answer in prose). Only a plain decimal number counts, and only in
``[0, 1]``: a JSON boolean, an exponent (``1e308``, ``1e-300``), a fraction or ratio (``1/10``), a signed value
or a number run into other characters is no score, and a reply whose ``score`` field or label holds such a
value has none (no other number of the reply is read instead). A reply without a usable value
is retried by the client; after the last retry the verdict has ``score=None`` and counts as a
judge failure (excluded from the judge mean, reported as a failure).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from graphmem.llm.client import LLMClient, LLMConfig, Messages
from graphmem.llm.prompts import block, make_nonce, render
from graphmem.llm.schemas import JudgeScore
from graphmem.qa.answer import CallUsage

ROLE = "qa_judge"
_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)
_DECIMAL = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_ALONE = r"(?<![\w.+\-/])({})(?![\w/%]|\.\d)"  # a number standing alone: no sign, exponent, fraction or suffix
_LABEL = re.compile(r"score\"?\s*[:=]\s*\"?([^\s\",}]*)", re.IGNORECASE)
_PERCENT = re.compile(r"(?<![\w.+\-/])(\d{1,3}(?:\.\d+)?)\s*%")
_UNIT = re.compile(_ALONE.format(r"0(?:\.\d+)?|1(?:\.0+)?"))


class SameModelError(ValueError):
    """The judge would grade answers of its own model and ``allow_same_model`` is false."""


def check_judge_config(answer: LLMConfig, judge: LLMConfig, allow_same_model: bool = False) -> None:
    """Refuse a judge at ``temperature != 0`` and a judge equal to the answer model (unless allowed)."""
    if judge.temperature != 0:
        raise ValueError(f"the judge must run at temperature 0, got {judge.temperature}")
    same = answer.model == judge.model and (answer.api_base or None) == (judge.api_base or None)
    if same and not allow_same_model:
        raise SameModelError(
            f"judge model {judge.model!r} is the answer model; configure a different qa.judge.llm.model, or set "
            "qa.judge.allow_same_model=true to force it (the results are then marked as self-judged)"
        )


def parse_score(text: str | None) -> float | None:
    """The judge's score in ``[0, 1]``, or ``None`` when the reply has none (module docstring)."""
    if not text:
        return None
    for match in _OBJECT.finditer(text):
        try:
            obj = json.loads(match.group(0))
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict) and "score" in obj:
            return _unit_score(obj["score"])
    if m := _LABEL.search(text):
        return _unit_score(m.group(1).rstrip(".;"))
    if m := _PERCENT.search(text):
        return _unit_score(m.group(1), scale=100.0)
    if m := _UNIT.search(text):
        return _unit_score(m.group(1))
    return None


def _unit_score(value: Any, scale: float = 1.0) -> float | None:
    """``value`` (a JSON number, or the text of a plain decimal) over ``scale`` when that lies in ``[0, 1]``."""
    if isinstance(value, str):
        value = float(value) if _DECIMAL.fullmatch(value.strip()) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    score = value / scale
    return float(score) if 0.0 <= score <= 1.0 else None


def parse_reason(text: str | None) -> str:
    for match in _OBJECT.finditer(text or ""):
        try:
            obj = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return str(obj.get("reason", ""))[:300]
    return ""


def judge_messages(question: str, reference: str, response: str) -> Messages:
    """System + user messages of one judgement (template ``qa_judge``)."""
    nonce = make_nonce([question, reference, response])
    return render(
        ROLE,
        nonce,
        question_block=block("question", question, nonce),
        reference_block=block("reference", reference, nonce),
        response_block=block("response", response, nonce),
    )


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge: the question text, the reference answer and the response."""

    qid: str
    question: str
    reference: str
    response: str


@dataclass
class Verdict(CallUsage):
    """The judge's score of one answer (``None`` when the judge gave no usable score)."""

    qid: str
    score: float | None
    reason: str = ""
    raw: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Judge:
    """Scores responses against references through ``client`` (temperature 0 enforced).

    Args:
        client: the judge model's :class:`LLMClient`.
        max_tokens: completion limit per verdict (default: 96).
    """

    def __init__(self, client: LLMClient, max_tokens: int = 96):
        if client.config.temperature != 0:
            raise ValueError(f"the judge must run at temperature 0, got {client.config.temperature}")
        self.client, self.max_tokens = client, int(max_tokens)

    def judge_many(self, items: Sequence[JudgeItem], on_done: Callable[[int], None] | None = None) -> list[Verdict]:
        def check(text: str) -> str | None:
            return None if parse_score(text) is not None else "no score in [0, 1] in the judge reply"

        out: list[Verdict] = []
        step = max(1, self.client.config.max_concurrency)
        for k in range(0, len(items), step):
            chunk = items[k : k + step]
            replies = self.client.complete_many(
                ROLE,
                [judge_messages(i.question, i.reference, i.response) for i in chunk],
                max_tokens=self.max_tokens,
                validate=check,
                schema=JudgeScore,
            )
            for item, c in zip(chunk, replies):
                if c is None:
                    out.append(Verdict(item.qid, None))
                    continue
                out.append(Verdict(item.qid, parse_score(c.text), parse_reason(c.text), c.text, **CallUsage.of(c)))
            if on_done is not None:
                on_done(len(chunk))
        return out


# ---------------------------------------------------------------------------- sufficiency of loaded records
SUFFICIENCY_ROLE = "walk_judge"
"""the prompt of a sufficiency verdict (the walk trainer's ``judge`` reward, the streaming ``judge`` feedback)"""


def sufficiency_messages(question: str, reference: str, records: Sequence[str]) -> Messages:
    """System + user messages of one judgement of whether ``records`` suffice to give ``reference`` as the answer
    to ``question`` (template ``walk_judge``), each part in its own delimited block."""
    nonce = make_nonce([question, reference, *records])
    memory = "\n".join(block("record", r, nonce, str(i)) for i, r in enumerate(records))
    return render(
        SUFFICIENCY_ROLE,
        nonce,
        memory_block=memory,
        question_block=block("question", question, nonce),
        reference_block=block("reference", reference, nonce),
    )


def usable_score(text: str) -> str | None:
    """``None`` when a reply holds a score in ``[0, 1]``, else why it is unusable (the client retries it)."""
    return None if parse_score(text) is not None else "no score in [0, 1] in the reply"
