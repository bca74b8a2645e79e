"""Loader for LoCoMo files in the original JSON schema (a list of conversation records).

Decisions on malformed input:

* Anything that breaks a conversation (top level not a list, a record without ``sample_id`` or
  ``conversation``, a conversation without speakers or sessions, a turn without ``dia_id`` /
  ``speaker`` / ``text``, a duplicated ``dia_id``, ``qa`` not a list) raises
  :class:`LocomoFormatError` naming the file, the record (index and sample id) and the field:
  the graph cannot be built from it.
* A single bad QA item (no question text, unknown category, answer of a wrong type, evidence
  not a list) is discarded, counted and named in :attr:`LoadReport.discarded`: the other
  questions stay usable.
* Evidence strings are split on ``[;\\s]+``; an id of the form ``D:<s>:<t>`` or with leading
  zeros is rewritten to the canonical ``D<s>:<t>`` (reported as repaired); a piece that is no
  id at all (e.g. a bare ``D``) is dropped and reported as malformed; an id naming no turn is
  kept out of ``evidence``, stored on ``Question.dangling_evidence`` and reported.
* A QA item without an ``evidence`` field is kept with no gold evidence and counted in
  :attr:`LoadReport.missing_gold`; a file that is not UTF-8 is refused naming the byte and line.
* An unparsable session date gives ``date_time=None`` and is reported in ``unparsed_dates``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from graphmem.datasets.paths import read_text
from graphmem.datasets.types import LOCOMO_CATEGORIES, Conversation, LoadReport, Question, Session, Turn

# The category numbers are not in paper order; the mapping is explicit and checked here.
assert LOCOMO_CATEGORIES == {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = 5

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%I:%M%p on %d %B, %Y")


class LocomoFormatError(ValueError):
    """A LoCoMo file that cannot be loaded; the message names file, record and field."""


def parse_session_datetime(raw: str | None) -> datetime | None:
    """Parse ``"1:56 pm on 8 May, 2023"`` (a few close variants); ``None`` when unparsable."""
    if not isinstance(raw, str):
        return None
    text = " ".join(raw.replace("\u202f", " ").split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def load_locomo(path: str | Path) -> tuple[list[Conversation], list[Question], LoadReport]:
    """Read a LoCoMo JSON file; returns conversations, questions and the :class:`LoadReport`."""
    path = Path(path)
    try:
        raw = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise LocomoFormatError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, list):
        raise LocomoFormatError(f"{path}: top level must be a list of conversation records, got {type(raw).__name__}")
    report = LoadReport(source=str(path))
    conversations, questions, seen = [], [], set()
    for index, record in enumerate(raw):
        where = f"{path}: record {index}"
        if not isinstance(record, dict):
            raise LocomoFormatError(f"{where}: must be an object, got {type(record).__name__}")
        sample_id = _field(record, "sample_id", str, where)
        where = f"{path}: record {index} (sample_id {sample_id!r})"
        if sample_id in seen:
            raise LocomoFormatError(f"{where}: field 'sample_id' repeats an earlier record")
        seen.add(sample_id)
        conv = _conversation(_field(record, "conversation", dict, where), sample_id, where, report)
        conversations.append(conv)
        turn_ids = {t.dia_id for t in conv.turns}
        for i, qa in enumerate(_field(record, "qa", list, where)):
            q = _question(qa, sample_id, i, turn_ids, report)
            if q is not None:
                questions.append(q)
    report.records, report.questions = len(conversations), len(questions)
    return conversations, questions, report


def _field(obj: dict, name: str, kind: type, where: str) -> Any:
    if name not in obj:
        raise LocomoFormatError(f"{where}: missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (kind is str and not value):
        raise LocomoFormatError(f"{where}: field {name!r} must be a non-empty {kind.__name__}, got {value!r:.60}")
    return value


def _conversation(conv: dict, sample_id: str, where: str, report: LoadReport) -> Conversation:
    speaker_a = _field(conv, "speaker_a", str, f"{where} conversation")
    speaker_b = _field(conv, "speaker_b", str, f"{where} conversation")
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    sessions, dia_ids = [], set()
    for n in numbers:
        key = f"session_{n}"
        turns_raw = conv[key]
        if not isinstance(turns_raw, list):
            raise LocomoFormatError(f"{where}: field 'conversation.{key}' must be a list of turns")
        raw_date = conv.get(f"{key}_date_time")
        date = parse_session_datetime(raw_date)
        if date is None:
            report.unparsed_dates.append(f"{sample_id} {key}: {raw_date!r}")
        turns = []
        for pos, t in enumerate(turns_raw):
            tw = f"{where}: conversation.{key}[{pos}]"
            if not isinstance(t, dict):
                raise LocomoFormatError(f"{tw}: a turn must be an object")
            dia_id = _field(t, "dia_id", str, tw)
            if dia_id in dia_ids:
                raise LocomoFormatError(f"{tw}: field 'dia_id' {dia_id!r} repeats an earlier turn")
            dia_ids.add(dia_id)
            text = t.get("text")
            if not isinstance(text, str):
                raise LocomoFormatError(f"{tw}: field 'text' must be a string, got {text!r:.60}")
            caption, query = t.get("blip_caption"), t.get("query")
            turns.append(
                Turn(
                    dia_id=dia_id,
                    speaker=_field(t, "speaker", str, tw),
                    text=text,
                    session=n,
                    position=pos,
                    image_caption=caption if isinstance(caption, str) and caption.strip() else None,
                    image_query=query if isinstance(query, str) and query.strip() else None,
                )
            )
        if turns:
            sessions.append(Session(index=n, date_time=date, raw_date_time=raw_date, turns=tuple(turns)))
    if not sessions:
        raise LocomoFormatError(f"{where}: field 'conversation' has no non-empty session_<n> list (empty conversation)")
    return Conversation(sample_id=sample_id, speaker_a=speaker_a, speaker_b=speaker_b, sessions=tuple(sessions))


def _question(qa: Any, sample_id: str, i: int, turn_ids: set[str], report: LoadReport) -> Question | None:
    name = f"{sample_id}#{i}"
    if not isinstance(qa, dict):
        report.discarded.append(f"{name}: QA item is not an object")
        return None
    text, category = qa.get("question"), qa.get("category")
    if not isinstance(text, str) or not text.strip():
        report.discarded.append(f"{name}: field 'question' missing or empty")
        return None
    if isinstance(category, bool) or category not in LOCOMO_CATEGORIES:
        report.discarded.append(f"{name}: field 'category' = {category!r} is not one of {sorted(LOCOMO_CATEGORIES)}")
        return None
    answer = qa.get("adversarial_answer") if category == ADVERSARIAL else None
    if answer is None:
        answer = qa.get("answer")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if answer is not None and not isinstance(answer, str):
        report.discarded.append(f"{name}: field 'answer' has type {type(answer).__name__}")
        return None
    if "evidence" not in qa:
        report.missing_gold.append(f"{name}: no field 'evidence'")
    raw_evidence = qa.get("evidence", [])
    if not isinstance(raw_evidence, list):
        report.discarded.append(f"{name}: field 'evidence' must be a list, got {type(raw_evidence).__name__}")
        return None
    evidence, dangling = normalize_evidence(raw_evidence, turn_ids, name, report)
    return Question(
        qid=name,
        graph=sample_id,
        text=text,
        answer=answer,
        evidence=evidence,
        category=category,
        dangling_evidence=dangling,
    )


def normalize_evidence(
    raw: list, turn_ids: set[str], name: str, report: LoadReport
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split, repair and check evidence strings (see module docstring); returns (evidence, dangling)."""
    evidence: list[str] = []
    dangling: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            report.malformed_evidence.append(f"{name}: {item!r}")
            continue
        pieces = [p for p in re.split(r"[;\s]+", item) if p]
        if len(pieces) > 1:
            report.repaired_evidence.append(f"{name}: {item!r} -> {', '.join(pieces)}")
        for piece in pieces:
            m = _EVIDENCE_ID.fullmatch(piece)
            if m is None:
                report.malformed_evidence.append(f"{name}: {piece!r}")
                continue
            canonical = f"D{int(m.group(1))}:{int(m.group(2))}"
            ident = piece if piece in turn_ids else canonical
            if ident != piece:
                report.repaired_evidence.append(f"{name}: {piece!r} -> {ident!r}")
            target = evidence if ident in turn_ids else dangling
            if ident not in target:
                target.append(ident)
    for d in dangling:
        report.dangling_evidence.append(f"{name}: {d}")
    return tuple(evidence), tuple(dangling)
