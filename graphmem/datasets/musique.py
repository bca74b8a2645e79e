"""Loader for MuSiQue records in the official format (a JSON list, or JSONL with one record a line).

Each record becomes a :class:`MusiqueRecord` and a :class:`Question` over its own graph
(``graph = qid = id``). A MuSiQue passage is identified by its title (:func:`passage_id`); the
question's ``evidence`` and ``support_titles`` are the titles of its supporting paragraphs and
``support_chain`` the title of each decomposition step's ``paragraph_support_idx``, in step order.
``category`` is the hop type from the id prefix (``2hop``, ``3hop1``, ``3hop2``, ``4hop1``, ...).

Decisions on malformed input:

* A record that is not an object, lacks ``id`` / ``question`` / ``paragraphs``, has a paragraph
  without an integer ``idx``, a string ``title`` and ``paragraph_text`` and a boolean
  ``is_supporting``, repeats a paragraph ``idx`` or an ``id``, or whose
  ``question_decomposition`` is not a list of objects with a ``question`` raises
  :class:`MusiqueFormatError` naming the file, the record (index or line, and id) and the field.
* A step whose ``paragraph_support_idx`` names no paragraph of the record is kept with
  ``paragraph_support_idx=None``, its chain link goes to ``dangling_evidence`` and the report.
* A supporting paragraph that no step names is still gold evidence (``is_supporting`` decides
  evidence; the steps decide the chain); a step whose paragraph is not marked supporting is
  reported in :attr:`LoadReport.repaired_evidence` and its paragraph joins the evidence.
* An unanswerable record (``answerable: false``, MuSiQue-Full) is loaded as it is; its flag is kept.
"""

from __future__ import annotations

from pathlib import Path

from graphmem.datasets.records import one_question_records
from graphmem.datasets.types import LoadReport, MusiqueParagraph, MusiqueRecord, MusiqueStep, Question, record_question


class MusiqueFormatError(ValueError):
    """A MuSiQue file that cannot be loaded; the message names file, record and field."""


def passage_id(title: str) -> str:
    """Node id of the passage titled ``title`` (passages are title-deduplicated)."""
    return title


def load_musique(path: str | Path) -> tuple[list[MusiqueRecord], list[Question], LoadReport]:
    """Read a MuSiQue file; returns records, questions (one per record) and the report."""
    return one_question_records(path, MusiqueFormatError, "id", _read)


def _read(raw: dict, qid: str, where: str, report: LoadReport) -> tuple[MusiqueRecord, Question]:
    record = _record(raw, qid, where)
    return record, _question(record, report)


def _text(raw: dict, name: str, where: str, required: bool = True) -> str:
    value = raw.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or (required and not value.strip()):
        if not required and value is None:
            return ""
        raise MusiqueFormatError(f"{where}: field {name!r} missing or not a {'non-empty ' if required else ''}string")
    return value


def _record(raw: dict, qid: str, where: str) -> MusiqueRecord:
    question = _text(raw, "question", where)
    paragraphs_raw = raw.get("paragraphs")
    if not isinstance(paragraphs_raw, list) or not paragraphs_raw:
        raise MusiqueFormatError(f"{where}: field 'paragraphs' must be a non-empty list of paragraph objects")
    paragraphs, idxs = [], set()
    for j, p in enumerate(paragraphs_raw):
        pw = f"{where}: paragraphs[{j}]"
        if not isinstance(p, dict):
            raise MusiqueFormatError(f"{pw}: must be an object")
        idx = p.get("idx")
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise MusiqueFormatError(f"{pw}: field 'idx' missing or not an integer")
        if idx in idxs:
            raise MusiqueFormatError(f"{pw}: field 'idx' {idx} repeats an earlier paragraph")
        idxs.add(idx)
        if not isinstance(p.get("is_supporting"), bool):
            raise MusiqueFormatError(f"{pw}: field 'is_supporting' missing or not a boolean")
        paragraphs.append(
            MusiqueParagraph(
                idx=idx,
                title=_text(p, "title", pw),
                text=_text(p, "paragraph_text", pw),
                is_supporting=p["is_supporting"],
            )
        )
    steps_raw = raw.get("question_decomposition", [])
    if not isinstance(steps_raw, list):
        raise MusiqueFormatError(f"{where}: field 'question_decomposition' must be a list of step objects")
    steps = []
    for j, s in enumerate(steps_raw):
        sw = f"{where}: question_decomposition[{j}]"
        if not isinstance(s, dict):
            raise MusiqueFormatError(f"{sw}: must be an object")
        support = s.get("paragraph_support_idx")
        if support is not None and (not isinstance(support, int) or isinstance(support, bool)):
            raise MusiqueFormatError(f"{sw}: field 'paragraph_support_idx' must be an integer or null")
        steps.append(
            MusiqueStep(
                id=str(s.get("id", j)),
                question=_text(s, "question", sw),
                answer=_text(s, "answer", sw, required=False),
                paragraph_support_idx=support,
            )
        )
    aliases = raw.get("answer_aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise MusiqueFormatError(f"{where}: field 'answer_aliases' must be a list of strings")
    answerable = raw.get("answerable", True)
    if not isinstance(answerable, bool):
        raise MusiqueFormatError(f"{where}: field 'answerable' must be a boolean")
    return MusiqueRecord(
        qid=qid,
        question=question,
        answer=_text(raw, "answer", where, required=False),
        answer_aliases=tuple(aliases),
        answerable=answerable,
        paragraphs=tuple(paragraphs),
        decomposition=tuple(steps),
    )


def _question(record: MusiqueRecord, report: LoadReport) -> Question:
    by_idx = {p.idx: p for p in record.paragraphs}
    evidence = [passage_id(p.title) for p in record.paragraphs if p.is_supporting]
    chain, dangling = [], []
    for step in record.decomposition:
        paragraph = by_idx.get(step.paragraph_support_idx) if step.paragraph_support_idx is not None else None
        if paragraph is None:
            if step.paragraph_support_idx is not None:
                dangling.append(f"paragraph idx {step.paragraph_support_idx}")
            continue
        if not paragraph.is_supporting:
            report.repaired_evidence.append(f"{record.qid}: step {step.id} names paragraph {paragraph.idx}, not marked")
            evidence.append(passage_id(paragraph.title))
        chain.append(passage_id(paragraph.title))
    evidence = list(dict.fromkeys(evidence))
    return record_question(record, report, evidence, dangling, record.hops, evidence, chain)
