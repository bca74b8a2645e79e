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
* Evidence strings are split on ``[;,\\s]+`` and trailing dots stripped; a same-session range
  (``D12:3-D12:5``, ``D12:3-5``) names each id in it; an id of the form ``D:<s>:<t>`` or with leading
  zeros is rewritten to the canonical ``D<s>:<t>`` (each reported as repaired); a piece that is no
  id at all (e.g. a bare ``D``) is dropped and reported as malformed; an id naming no turn is
  kept out of ``evidence``, stored on ``Question.dangling_evidence`` and reported. A question
  left with no resolvable evidence is kept without gold (recall leaves it out) and counted in
  :attr:`LoadReport.unresolved_gold`. The REALTALK loader (:mod:`graphmem.datasets.realtalk`)
  reads its QA items with the same code (:func:`read_qa`).
* A QA item without an ``evidence`` field is kept with no gold evidence and counted in
  :attr:`LoadReport.missing_gold`; a file that is not UTF-8 is refused naming the byte and line.
* An unparsable session date gives ``date_time=None`` and is reported in ``unparsed_dates``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from graphmem.datasets.records import read_json
from graphmem.datasets.types import LOCOMO_CATEGORIES, Conversation, LoadReport, Question, Session, Turn

# The category numbers are not in paper order; the mapping is explicit and checked here.
assert LOCOMO_CATEGORIES == {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = 5

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
_EVIDENCE_RANGE = re.compile(r"D:?(\d+):(\d+)-(?:D:?(\d+):)?(\d+)")
_SEPARATORS = re.compile(r"[;,\s]+")
MAX_RANGE = 50
"""The most ids one evidence range may name; a longer one is reported as malformed."""
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%I:%M%p on %d %B, %Y")


class LocomoFormatError(ValueError):
    """A LoCoMo file that cannot be loaded; the message names file, record and field."""


def parse_session_datetime(raw: str | None, formats: tuple[str, ...] = _DATE_FORMATS) -> datetime | None:
    """Parse ``"1:56 pm on 8 May, 2023"`` (a few close variants; or any of ``formats``); ``None`` when unparsable."""
    if not isinstance(raw, str):
        return None
    text = " ".join(raw.replace("\u202f", " ").split())
    for fmt in formats:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def load_locomo(path: str | Path) -> tuple[list[Conversation], list[Question], LoadReport]:
    """Read a LoCoMo JSON file; returns conversations, questions and the :class:`LoadReport`."""
    path = Path(path)
    raw = read_json(path, LocomoFormatError, (list, "a list of conversation records"))
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
            q = read_qa(qa, sample_id, i, turn_ids, report)
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
    sessions = read_sessions(conv, sample_id, where, "conversation.", report, LocomoFormatError, _turn)
    return Conversation(sample_id=sample_id, speaker_a=speaker_a, speaker_b=speaker_b, sessions=sessions)


def _turn(t: dict, session: int, pos: int, where: str) -> Turn:
    text = t.get("text")
    if not isinstance(text, str):
        raise LocomoFormatError(f"{where}: field 'text' must be a string, got {text!r:.60}")
    caption, query = t.get("blip_caption"), t.get("query")
    return Turn(
        dia_id=_field(t, "dia_id", str, where),
        speaker=_field(t, "speaker", str, where),
        text=text,
        session=session,
        position=pos,
        image_caption=caption if isinstance(caption, str) and caption.strip() else None,
        image_query=query if isinstance(query, str) and query.strip() else None,
    )


def read_sessions(
    conv: dict,
    sample_id: str,
    where: str,
    prefix: str,
    report: LoadReport,
    error: type[Exception],
    read_turn: Callable[[dict, int, int, str], Turn],
    formats: tuple[str, ...] = _DATE_FORMATS,
) -> tuple[Session, ...]:
    """The non-empty ``session_<n>`` lists of ``conv`` in number order (LoCoMo's layout, REALTALK's too), each
    turn read by ``read_turn(turn, n, position, where)``, each session dated by ``session_<n>_date_time`` in one
    of ``formats`` (an unparsable date reported). A session that is not a list, a turn that is not an object, a
    repeated ``dia_id`` or no turn at all raises ``error`` naming ``where`` and the field (``prefix`` + key)."""
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    sessions, dia_ids = [], set()
    for n in numbers:
        key = f"session_{n}"
        turns_raw = conv[key]
        if not isinstance(turns_raw, list):
            raise error(f"{where}: field '{prefix}{key}' must be a list of turns")
        raw_date = conv.get(f"{key}_date_time")
        date = parse_session_datetime(raw_date, formats)
        if date is None:
            report.unparsed_dates.append(f"{sample_id} {key}: {raw_date!r}")
        turns = []
        for pos, t in enumerate(turns_raw):
            tw = f"{where}: {prefix}{key}[{pos}]"
            if not isinstance(t, dict):
                raise error(f"{tw}: a turn must be an object")
            turn = read_turn(t, n, pos, tw)
            if turn.dia_id in dia_ids:
                raise error(f"{tw}: field 'dia_id' {turn.dia_id!r} repeats an earlier turn")
            dia_ids.add(turn.dia_id)
            turns.append(turn)
        if turns:
            sessions.append(Session(index=n, date_time=date, raw_date_time=raw_date, turns=tuple(turns)))
    if not sessions:
        field = f"field {prefix.rstrip('.')!r} has" if prefix else "the file has"
        raise error(f"{where}: {field} no non-empty session_<n> list (empty conversation)")
    return tuple(sessions)


@dataclass(frozen=True)
class QAFields:
    """How a QA item of a LoCoMo-layout file is read: its valid categories, and the category whose answer is
    ``adversarial_answer`` (``None``: none)."""

    categories: Mapping[int, str] = field(default_factory=lambda: dict(LOCOMO_CATEGORIES))
    adversarial: int | None = ADVERSARIAL


def read_qa(
    qa: Any, sample_id: str, i: int, turn_ids: set[str], report: LoadReport, fields: QAFields = QAFields()
) -> Question | None:
    """QA item ``i`` of conversation ``sample_id`` as a :class:`Question` (``None``: discarded and reported); its
    evidence resolved against ``turn_ids`` by :func:`normalize_evidence`. A question left with no resolvable
    evidence is kept (it has no gold set, so recall leaves it out) and counted in ``report.unresolved_gold``."""
    name = f"{sample_id}#{i}"
    if not isinstance(qa, dict):
        report.discarded.append(f"{name}: QA item is not an object")
        return None
    text, category = qa.get("question"), qa.get("category")
    if not isinstance(text, str) or not text.strip():
        report.discarded.append(f"{name}: field 'question' missing or empty")
        return None
    if isinstance(category, bool) or category not in fields.categories:
        report.discarded.append(f"{name}: field 'category' = {category!r} is not one of {sorted(fields.categories)}")
        return None
    answer = qa.get("adversarial_answer") if category == fields.adversarial else None
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
    if not evidence and "evidence" in qa:
        report.unresolved_gold.append(f"{name}: {raw_evidence!r:.60}")
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
        pieces = [p.rstrip(".") for p in _SEPARATORS.split(item) if p.rstrip(".")]
        if len(pieces) > 1 or (pieces and pieces[0] != item):
            report.repaired_evidence.append(f"{name}: {item!r} -> {', '.join(pieces)}")
        if not pieces:
            report.malformed_evidence.append(f"{name}: {item!r}")
        for piece in pieces:
            ids = _piece_ids(piece)
            if ids is None:
                report.malformed_evidence.append(f"{name}: {piece!r}")
                continue
            if len(ids) > 1:
                report.repaired_evidence.append(f"{name}: {piece!r} -> {', '.join(ids)}")
            for canonical in ids:
                ident = piece if piece in turn_ids else canonical
                if ident != piece and len(ids) == 1:
                    report.repaired_evidence.append(f"{name}: {piece!r} -> {ident!r}")
                target = evidence if ident in turn_ids else dangling
                if ident not in target:
                    target.append(ident)
    for d in dangling:
        report.dangling_evidence.append(f"{name}: {d}")
    return tuple(evidence), tuple(dangling)


def _piece_ids(piece: str) -> list[str] | None:
    """The canonical ``D<s>:<t>`` ids one evidence piece names: one id, or each id of a same-session range
    (``D12:3-D12:5``, ``D12:3-5``, at most :data:`MAX_RANGE` ids); ``None`` when it names none."""
    m = _EVIDENCE_ID.fullmatch(piece)
    if m is not None:
        return [f"D{int(m.group(1))}:{int(m.group(2))}"]
    m = _EVIDENCE_RANGE.fullmatch(piece)
    if m is None:
        return None
    day, first, last = int(m.group(1)), int(m.group(2)), int(m.group(4))
    if m.group(3) is not None and int(m.group(3)) != day or not 0 <= last - first < MAX_RANGE:
        return None
    return [f"D{day}:{t}" for t in range(first, last + 1)]
