"""Loader for 2WikiMultiHopQA records in the original format (a JSON list, or JSONL with one record a line).

A 2Wiki record is a HotpotQA record (``_id, type, question, answer, context, supporting_facts``)
plus ``evidences``, its reasoning path as ``[subject, relation, object]`` Wikidata triples. Each
record becomes a :class:`HotpotRecord`, read by the HotpotQA loader's own record reader, and a
:class:`Question` over its own graph (``graph = qid = _id``), so the graph is HotpotQA's: one node
per sentence (``"<title>::<idx>"``, the gold evidence) and per paragraph title. On top of it:

* ``category`` is the record's ``type`` (``compositional``, ``comparison``, ``bridge_comparison``,
  ``inference``), results are reported per type;
* ``evidence_triples`` keeps the triples as given (gold: :class:`graphmem.policies.base.Query`
  has no such field);
* ``support_chain`` is the title node (:func:`graphmem.datasets.hotpotqa.title_id`) of each
  supporting title in the order the triples reach it (:func:`chain_order`), which
  :func:`graphmem.eval.metrics.chain_following` scores.

Decisions on malformed input, HotpotQA's (:mod:`graphmem.datasets.hotpotqa`) plus:

* a record whose ``type`` is not a non-empty string, or whose ``evidences`` is not a list, raises
  :class:`TwoWikiFormatError` naming the file, the record (index or line, and ``_id``) and the field,
  as every error of the HotpotQA reader does (re-raised as a :class:`TwoWikiFormatError`);
* a paragraph that repeats a title of its record is dropped, the first kept, and named in
  :attr:`LoadReport.discarded` (2Wiki repeats a page as a distractor with the same text);
* a supporting fact past the end of its paragraph goes to ``dangling_evidence`` and the report;
* a triple that is not three strings is reported in :attr:`LoadReport.malformed_evidence` and
  dropped; a record without ``evidences`` keeps its gold sentences and orders its chain as below;
* when the triples do not name every supporting title, the chain is the supporting titles in
  ``supporting_facts`` order, and the question is listed in :attr:`LoadReport.chains_in_fact_order`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

from graphmem.datasets.hotpotqa import HotpotFormatError, title_id
from graphmem.datasets.hotpotqa import _question as hotpot_question
from graphmem.datasets.hotpotqa import _record as hotpot_record
from graphmem.datasets.records import one_question_records
from graphmem.datasets.types import HotpotRecord, LoadReport, Question

Triple = tuple[str, str, str]


class TwoWikiFormatError(HotpotFormatError):
    """A 2WikiMultiHopQA file that cannot be loaded; the message names file, record and field."""


def load_twowiki(path: str | Path) -> tuple[list[HotpotRecord], list[Question], LoadReport]:
    """Read a 2WikiMultiHopQA file; returns records, questions (one per record) and the report."""
    return one_question_records(path, TwoWikiFormatError, "_id", _read)


def _read(raw: dict, qid: str, where: str, report: LoadReport) -> tuple[HotpotRecord, Question]:
    """A record and its question, the question's chain in the order of the record's evidence triples."""
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        raise TwoWikiFormatError(f"{where}: field 'type' missing or not a non-empty string")
    try:
        record = hotpot_record(raw, qid, where, report)
    except HotpotFormatError as err:
        raise TwoWikiFormatError(str(err)) from None
    triples = _triples(raw, qid, where, report)
    question = hotpot_question(record, report)
    chain, by_triples = chain_order(question.support_titles, triples)
    if not by_triples:
        report.chains_in_fact_order.append(qid)
    chain_ids = tuple(title_id(t) for t in chain)
    return record, dataclasses.replace(question, support_chain=chain_ids, evidence_triples=tuple(triples))


def _triples(raw: dict, qid: str, where: str, report: LoadReport) -> list[Triple]:
    """The record's well-formed ``evidences`` triples, in order (a malformed one reported and dropped)."""
    given = raw.get("evidences", [])
    if not isinstance(given, list):
        raise TwoWikiFormatError(f"{where}: field 'evidences' must be a list of [subject, relation, object]")
    triples = []
    for j, t in enumerate(given):
        if isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) for x in t):
            triples.append((t[0], t[1], t[2]))
        else:
            report.malformed_evidence.append(f"{qid}: evidences[{j}] = {t!r:.60}")
    return triples


def _name_keys(name: str) -> tuple[str, str]:
    """How a triple's entity is matched to a title: lower-cased with spaces collapsed, as given and without
    a trailing parenthetical (from the last ``(`` of a name that ends in ``)``; the name itself when that
    leaves nothing)."""
    full = " ".join(name.lower().split())
    opens = full.rfind("(")
    core = full[:opens].rstrip() if full.endswith(")") and opens >= 0 else full
    return full, core or full


def chain_order(titles: Sequence[str], triples: Sequence[Triple]) -> tuple[tuple[str, ...], bool]:
    """The supporting ``titles`` in the order the ``triples`` reach them, and whether they did.

    Each triple's subject, then its object, is matched to a title (:func:`_name_keys`: the name as
    given first, then both without their trailing parenthetical, so ``"Get Low"`` reaches
    ``"Get Low (Dillon Francis and DJ Snake song)"``); a title joins the chain when first reached.
    When some title is never reached the order is unknown, and ``titles`` (supporting-facts order)
    is returned with ``False``.
    """
    exact, loose = {}, {}
    for t in titles:
        full, core = _name_keys(t)
        exact.setdefault(full, t)
        loose.setdefault(core, t)
    chain: list[str] = []
    for subject, _, obj in triples:
        for name in (subject, obj):
            full, core = _name_keys(name)
            title = exact.get(full) or loose.get(core)
            if title is not None and title not in chain:
                chain.append(title)
    if len(chain) < len(set(titles)):
        return tuple(titles), False
    return tuple(chain), True
