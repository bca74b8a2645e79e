"""Typed records shared by the dataset loaders, the graph builders and the evaluation harness.

Gold fields (answers, evidence, categories) live only on :class:`Question`; policies receive a
:class:`graphmem.policies.base.Query`, which has none of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


@dataclass(frozen=True)
class Turn:
    """One dialogue turn (LoCoMo, REALTALK).

    ``date_time`` is the turn's own time when the file gives one (REALTALK), else ``None`` (its
    session's date is the time); ``raw_date_time`` is that field as written."""

    dia_id: str
    speaker: str
    text: str
    session: int
    position: int  # 0-based order inside its session
    image_caption: str | None = None
    image_query: str | None = None
    date_time: datetime | None = None
    raw_date_time: str | None = None


@dataclass(frozen=True)
class Session:
    index: int
    date_time: datetime | None
    raw_date_time: str | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Conversation:
    """A conversation of sessions of turns (LoCoMo; REALTALK, whose ``speaker`` is a chat handle)."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


@dataclass(frozen=True)
class Question:
    """A question over one memory graph, with its gold fields (used by metrics and rewards only).

    Args:
        qid: unique question id (``<graph>#<index>`` for LoCoMo, HotpotQA's ``_id``).
        graph: name of the graph the question is asked over (LoCoMo sample id, HotpotQA id).
        text: the question.
        answer: gold answer (``adversarial_answer`` for LoCoMo category 5), ``None`` when absent.
        evidence: gold node ids (LoCoMo dia_ids; HotpotQA ``title::sentence``).
        category: LoCoMo category 1-5, HotpotQA type (``bridge``/``comparison``), MuSiQue hop type or 2Wiki
            type (``compositional``, ``comparison``, ``bridge_comparison``, ``inference``).
        dangling_evidence: gold ids that name no node (reported, never silently dropped).
        support_titles: gold paragraph titles (HotpotQA, MuSiQue, 2Wiki; empty for LoCoMo).
        support_chain: the gold reasoning chain, the supporting passage node id of each step in
            step order: MuSiQue's decomposition steps, 2Wiki's evidence triples (empty elsewhere).
        evidence_triples: 2Wiki's gold reasoning path as ``(subject, relation, object)`` Wikidata
            triples, in the file's order (empty elsewhere).
    """

    qid: str
    graph: str
    text: str
    answer: str | None
    evidence: tuple[str, ...]
    category: int | str
    dangling_evidence: tuple[str, ...] = ()
    support_titles: tuple[str, ...] = ()
    support_chain: tuple[str, ...] = ()
    evidence_triples: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        # a saved set stores each triple as a JSON list: read back, it is a tuple again
        object.__setattr__(self, "evidence_triples", tuple(tuple(t) for t in self.evidence_triples))

    @property
    def category_name(self) -> str:
        if isinstance(self.category, int):
            return LOCOMO_CATEGORIES[self.category]
        return str(self.category)


@dataclass(frozen=True)
class Paragraph:
    title: str
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class HotpotRecord:
    qid: str
    question: str
    answer: str
    paragraphs: tuple[Paragraph, ...]
    supporting_facts: tuple[tuple[str, int], ...]
    type: str
    level: str


@dataclass(frozen=True)
class MusiqueParagraph:
    """One of a MuSiQue record's candidate paragraphs (``idx`` is the record's own numbering)."""

    idx: int
    title: str
    text: str
    is_supporting: bool


@dataclass(frozen=True)
class MusiqueStep:
    """One single-hop step of ``question_decomposition``; ``#k`` in ``question`` names step k's answer."""

    id: str
    question: str
    answer: str
    paragraph_support_idx: int | None


@dataclass(frozen=True)
class MusiqueRecord:
    """A MuSiQue-Ans record (official format); ``hops`` is the id prefix (``2hop``, ``3hop1``, ...)."""

    qid: str
    question: str
    answer: str
    answer_aliases: tuple[str, ...]
    answerable: bool
    paragraphs: tuple[MusiqueParagraph, ...]
    decomposition: tuple[MusiqueStep, ...]

    @property
    def hops(self) -> str:
        return self.qid.split("__", 1)[0]


@dataclass
class LoadReport:
    """Counts of what a loader repaired or discarded, printed by the scripts."""

    source: str
    records: int = 0
    questions: int = 0
    repaired_evidence: list[str] = field(default_factory=list)
    dangling_evidence: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    malformed_evidence: list[str] = field(default_factory=list)
    unparsed_dates: list[str] = field(default_factory=list)
    merged_titles: list[str] = field(default_factory=list)
    missing_gold: list[str] = field(default_factory=list)
    """questions kept without gold evidence because the record has no gold field (``evidence``, ``supporting_facts``)"""
    chains_in_fact_order: list[str] = field(default_factory=list)
    """questions whose gold chain is their supporting titles in ``supporting_facts`` order, because their
    evidence triples (2Wiki) do not name every supporting title"""
    unresolved_gold: list[str] = field(default_factory=list)
    """questions whose evidence field names no existing turn (empty, or every id dangling or malformed): kept
    without gold, so recall leaves them out"""

    def merge(self, other: LoadReport) -> LoadReport:
        """This report and ``other``'s (another file of the same load) as one: counts added, lists joined."""
        merged = LoadReport(source=self.source, records=self.records + other.records)
        merged.questions = self.questions + other.questions
        for f in dataclasses.fields(self):
            if f.name not in ("source", "records", "questions"):
                setattr(merged, f.name, getattr(self, f.name) + getattr(other, f.name))
        return merged

    def lines(self) -> list[str]:
        out = [f"{self.source}: {self.records} records, {self.questions} questions"]
        listed = (
            ("repaired evidence ids", self.repaired_evidence, ", ", 5),
            ("dangling evidence ids (name no turn)", self.dangling_evidence, ", ", 5),
            ("malformed evidence strings dropped", self.malformed_evidence, ", ", 5),
            ("unparsable session dates (timestamp unknown)", self.unparsed_dates, ", ", 3),
            ("questions without a gold field (kept, no gold)", self.missing_gold, ", ", 5),
            ("questions with no resolvable evidence (kept, left out of recall)", self.unresolved_gold, "; ", 3),
            ("gold chains in supporting-facts order (not all in the triples)", self.chains_in_fact_order, ", ", 3),
            ("discarded items (questions, repeated paragraphs)", self.discarded, "; ", 3),
            ("titles with several texts, joined into one passage", self.merged_titles, "; ", 3),
        )
        for label, items, sep, shown in listed:
            if items:
                more = " ..." if len(items) > shown else ""
                out.append(f"  {label}: {len(items)} ({sep.join(items[:shown])}{more})")
        return out


def record_question(
    record: Any,
    report: LoadReport,
    evidence: Sequence[str],
    dangling: Sequence[str],
    category: Any,
    titles: Sequence[str],
    chain: Sequence[str] = (),
) -> Question:
    """The question of a record that holds one (HotpotQA, MuSiQue: its graph is named after it), its dangling
    evidence reported."""
    for d in dangling:
        report.dangling_evidence.append(f"{record.qid}: {d}")
    return Question(
        qid=record.qid,
        graph=record.qid,
        text=record.question,
        answer=record.answer,
        evidence=tuple(evidence),
        category=category,
        dangling_evidence=tuple(dangling),
        support_titles=tuple(titles),
        support_chain=tuple(chain),
    )
