"""Loader for HotpotQA records in the original format (JSONL, one record a line, or a JSON list).

Each record becomes a :class:`HotpotRecord` and a :class:`Question` over its own graph
(``graph = qid = str(_id)``) whose evidence are sentence node ids ``"<title>::<sent_idx>"``.

Decisions on malformed input:

* A record that is not an object, or lacks ``_id`` / ``question`` / ``context``, or whose
  ``context`` is not a list of ``[title, [sentences]]`` pairs, raises :class:`HotpotFormatError`
  naming the file, the line (or list index), the id and the field; a repeated ``_id`` too.
* A paragraph whose title repeats an earlier one in the same record is dropped and named in
  :attr:`LoadReport.discarded` (node ids must be unique).
* A supporting fact naming a missing title or sentence goes to ``dangling_evidence`` and the
  report; a supporting fact that is not a ``[title, int]`` pair is reported as malformed.
* A record without ``supporting_facts`` is kept with no gold evidence and counted in
  :attr:`LoadReport.missing_gold`; a file that is not UTF-8 is refused naming the byte and line.
"""

from __future__ import annotations

from pathlib import Path

from graphmem.datasets.records import one_question_records
from graphmem.datasets.types import HotpotRecord, LoadReport, Paragraph, Question, record_question


class HotpotFormatError(ValueError):
    """A HotpotQA file that cannot be loaded; the message names file, record and field."""


def sentence_id(title: str, index: int) -> str:
    """Node id of sentence ``index`` of paragraph ``title``."""
    return f"{title}::{index}"


def title_id(title: str) -> str:
    """Node id of the title node of paragraph ``title``."""
    return f"{title}::title"


def load_hotpotqa(path: str | Path) -> tuple[list[HotpotRecord], list[Question], LoadReport]:
    """Read a HotpotQA file; returns records, questions (one per record) and the report."""
    return one_question_records(path, HotpotFormatError, "_id", _read, integer_ids=True)


def _read(raw: dict, qid: str, where: str, report: LoadReport) -> tuple[HotpotRecord, Question]:
    record = _record(raw, qid, where, report)
    return record, _question(record, report)


def _record(raw: dict, qid: str, where: str, report: LoadReport) -> HotpotRecord:
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        raise HotpotFormatError(f"{where}: field 'question' missing or empty")
    context = raw.get("context")
    if not isinstance(context, list) or not context:
        raise HotpotFormatError(f"{where}: field 'context' must be a non-empty list of [title, [sentences]]")
    paragraphs, titles = [], set()
    for j, par in enumerate(context):
        ok = isinstance(par, (list, tuple)) and len(par) == 2 and isinstance(par[0], str) and par[0]
        ok = ok and isinstance(par[1], list) and all(isinstance(s, str) for s in par[1])
        if not ok:
            raise HotpotFormatError(f"{where}: field 'context[{j}]' must be [title, [sentence strings]]")
        if par[0] in titles:
            report.discarded.append(f"{qid}: context[{j}] repeats paragraph title {par[0]!r}")
            continue
        titles.add(par[0])
        paragraphs.append(Paragraph(title=par[0], sentences=tuple(par[1])))
    facts = []
    if "supporting_facts" not in raw:
        report.missing_gold.append(f"{qid}: no field 'supporting_facts'")
    for j, fact in enumerate(raw.get("supporting_facts") or []):
        if (
            isinstance(fact, (list, tuple))
            and len(fact) == 2
            and isinstance(fact[0], str)
            and isinstance(fact[1], int)
            and not isinstance(fact[1], bool)
        ):
            facts.append((fact[0], fact[1]))
        else:
            report.malformed_evidence.append(f"{qid}: supporting_facts[{j}] = {fact!r:.60}")
    answer = raw.get("answer", "")
    answer = str(answer) if isinstance(answer, (str, int, float)) and not isinstance(answer, bool) else ""
    return HotpotRecord(
        qid=qid,
        question=question,
        answer=answer,
        paragraphs=tuple(paragraphs),
        supporting_facts=tuple(facts),
        type=str(raw.get("type", "")),
        level=str(raw.get("level", "")),
    )


def _question(record: HotpotRecord, report: LoadReport) -> Question:
    sizes = {p.title: len(p.sentences) for p in record.paragraphs}
    evidence, dangling, titles = [], [], []
    for title, idx in record.supporting_facts:
        node = sentence_id(title, idx)
        target = evidence if title in sizes and 0 <= idx < sizes[title] else dangling
        if node not in target:
            target.append(node)
        if title not in titles:
            titles.append(title)
    return record_question(record, report, evidence, dangling, record.type, titles)
