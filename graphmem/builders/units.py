"""What one dataset file turns into before encoding: graph units (name, node texts, builder) and questions.

* ``locomo``: one graph per conversation; ``hotpotqa``: one graph per question (title and
  sentence nodes, :mod:`graphmem.builders.hotpotqa`); ``musique``: one passage graph per question
  (:mod:`graphmem.builders.passages`).
* ``pooled`` (HotpotQA, MuSiQue): one passage graph over every distinct passage of the file's
  (first ``limit``) records, named :func:`pooled_name`; every question is asked over it. Without
  sentence nodes a HotpotQA question's evidence becomes its gold passages (its supporting
  sentences have no node then); MuSiQue's evidence is passage-level already.

Size bound: every text field a node is made of (a LoCoMo turn's ``speaker``, ``text`` and
``blip_caption``; a HotpotQA paragraph's title and its sentences together; a MuSiQue paragraph's
``title`` and ``paragraph_text``) holds at most ``GraphConfig.max_text_chars`` characters. A longer
one is refused, not split (a turn or passage is one node, the one its gold evidence names), by
:class:`TextSizeError`: one line naming the file, the record and the field.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from torch import Tensor

from graphmem.datasets.types import LoadReport, Question
from graphmem.errors import InputError
from graphmem.graph import MemoryGraph

if TYPE_CHECKING:
    from graphmem.builders.entities import EntityExtractor
    from graphmem.graphset import GraphConfig


class GraphUnit(NamedTuple):
    """One graph to build: its name, node texts (in node order) and ``build(embeddings, cfg, extractor)``."""

    name: str
    texts: list[str]
    build: Callable[[Tensor, "GraphConfig", "EntityExtractor"], MemoryGraph]


class TextSizeError(ValueError, InputError):
    """A turn or passage field longer than ``GraphConfig.max_text_chars``; the message names file, record and field."""


def _fields(kind: str, records: list) -> Iterator[tuple[int, object, str, str]]:
    """``(record index, record, field, text)`` of every text field a node of ``kind`` is made of."""
    for i, r in enumerate(records):
        if kind == "locomo":
            for t in r.turns:
                where = f"conversation.session_{t.session}[{t.position}] (dia_id {t.dia_id!r})"
                for name in ("speaker", "text"):
                    yield i, r, f"{where}: field {name!r}", getattr(t, name)
                yield i, r, f"{where}: field 'blip_caption'", t.image_caption or ""
        elif kind == "hotpotqa":
            for p in r.paragraphs:
                yield i, r, f"context paragraph {p.title[:60]!r}: the title", p.title
                yield i, r, f"context paragraph {p.title[:60]!r}: the sentences joined", "".join(p.sentences)
        else:
            for j, p in enumerate(r.paragraphs):
                yield i, r, f"paragraphs[{j}]: field 'title'", p.title
                yield i, r, f"paragraphs[{j}]: field 'paragraph_text'", p.text


def check_text_sizes(kind: str, path: Path, records: list, max_chars: int) -> None:
    """Raise :class:`TextSizeError` for the first text field of ``records`` (module docstring) longer than
    ``max_chars`` characters, naming the file, the record (index and id) and the field."""
    key = {"locomo": "sample_id", "hotpotqa": "_id", "musique": "id"}[kind]
    for i, r, field, text in _fields(kind, records):
        if len(text) > max_chars:
            ident = r.sample_id if kind == "locomo" else r.qid
            raise TextSizeError(
                f"{path}: record {i} ({key} {ident!r}): {field}: {len(text):,} characters, more than "
                f"graph.max_text_chars={max_chars:,}: refused (one turn or passage is one node; shorten it or "
                "raise graph.max_text_chars)"
            )


def pooled_name(path: str | Path) -> str:
    """Name of the pooled graph of a data file: ``pooled:<file stem>``."""
    return f"pooled:{Path(path).stem}"


def load_units(
    kind: str, path: Path, cfg: GraphConfig, pooled: bool = False, limit: int | None = None
) -> tuple[list[GraphUnit], list[Question], LoadReport]:
    """Load ``path`` as dataset ``kind`` and return its graph units, questions and load report."""
    from graphmem.graphset import POOLABLE

    if pooled and kind not in POOLABLE:
        raise ValueError(f"pooled mode is for {POOLABLE}, not {kind!r} (a LoCoMo graph is already one memory)")
    if kind == "locomo":
        from graphmem.builders.locomo import build_locomo_graph, node_texts
        from graphmem.datasets.locomo import load_locomo

        records, questions, report = load_locomo(path)
        records = records if limit is None else records[:limit]
        check_text_sizes(kind, path, records, cfg.max_text_chars)
        units = [GraphUnit(r.sample_id, node_texts(r), partial(build_locomo_graph, r)) for r in records]
        return _limited(units, questions, limit) + (report,)
    from graphmem.builders import passages as P

    if kind == "hotpotqa":
        from graphmem.datasets.hotpotqa import load_hotpotqa

        records, questions, report = load_hotpotqa(path)
        passages_of = P.hotpot_passages
    elif kind == "musique":
        from graphmem.datasets.musique import load_musique

        records, questions, report = load_musique(path)
        passages_of = P.musique_passages
    else:
        raise ValueError(f"unknown dataset kind {kind!r}")
    if limit is not None:
        records = records[:limit]
        keep = {r.qid for r in records}
        questions = [q for q in questions if q.graph in keep]
    check_text_sizes(kind, path, records, cfg.max_text_chars)
    if pooled:
        every = (p for r in records for p in passages_of(r))
        c = P.corpus(pooled_name(path), kind, every, pooled=True, duplicate_titles=cfg.duplicate_titles)
        report.merged_titles += [f"{t} ({cfg.duplicate_titles})" for t in c.merged_titles]
        unit = GraphUnit(c.name, P.node_texts(c, cfg), partial(P.build_passage_graph, c))
        return [unit], [_pooled_question(q, c.name, kind, cfg) for q in questions], report
    if kind == "hotpotqa":
        from graphmem.builders.hotpotqa import build_hotpot_graph, node_texts

        return [GraphUnit(r.qid, node_texts(r), partial(build_hotpot_graph, r)) for r in records], questions, report
    corpora = [P.corpus(r.qid, kind, passages_of(r), duplicate_titles=cfg.duplicate_titles) for r in records]
    report.merged_titles += [f"{c.name}: {t} ({cfg.duplicate_titles})" for c in corpora for t in c.merged_titles]
    return (
        [GraphUnit(c.name, P.node_texts(c, cfg), partial(P.build_passage_graph, c)) for c in corpora],
        questions,
        report,
    )


def _limited(units: list[GraphUnit], questions: list[Question], limit: int | None) -> tuple[list, list]:
    if limit is None:
        return units, questions
    units = units[:limit]
    keep = {u.name for u in units}
    return units, [q for q in questions if q.graph in keep]


def _pooled_question(q: Question, graph: str, kind: str, cfg: GraphConfig) -> Question:
    if kind == "hotpotqa" and not cfg.sentence_nodes:
        from graphmem.datasets.musique import passage_id

        return dataclasses.replace(q, graph=graph, evidence=tuple(passage_id(t) for t in q.support_titles))
    return dataclasses.replace(q, graph=graph)
