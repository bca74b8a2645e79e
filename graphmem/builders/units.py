"""What one dataset file turns into before encoding: graph units (name, node texts, builder) and questions.

Each dataset's entry in :mod:`graphmem.builders.registry` names its unit maker (``*_units``: one graph
per record) and its text fields (``*_fields``) from here; :func:`graphmem.builders.registry.load_units`
runs them, or :func:`pooled_units` over a poolable dataset's passages.

* ``locomo``, ``realtalk``: one graph per conversation; ``hotpotqa`` and ``2wiki``: one graph per question
  (title and sentence nodes, :mod:`graphmem.builders.hotpotqa`); ``musique``: one passage graph per
  question (:mod:`graphmem.builders.passages`).
* ``pooled`` (HotpotQA, MuSiQue, 2Wiki): one passage graph over every distinct passage of the
  file's (first ``limit``) records, named :func:`pooled_name`; every question is asked over it.
  With ``pool_size = n`` the records are cut, in file order, into consecutive groups of ``n`` (the
  last may be smaller), group ``k`` holding records ``k·n .. k·n + n - 1``, and each group is a
  pooled graph of its own, named ``pooled_name(path, k)``, over which only its records'
  questions are asked. Without sentence nodes a HotpotQA or 2Wiki question's evidence becomes its
  gold passages (its supporting sentences have no node then), and a 2Wiki chain's title nodes
  become their passages; MuSiQue's evidence is passage-level already.

Size bound: every text field a node is made of (a LoCoMo turn's ``speaker``, ``text`` and
``blip_caption``, a REALTALK turn's ``speaker``, ``clean_text`` and ``blip_caption``; a HotpotQA or
2Wiki paragraph's title and its sentences together; a MuSiQue paragraph's ``title`` and
``paragraph_text``) holds at most ``GraphConfig.max_text_chars`` characters. A longer one is refused,
not split (a turn or passage is one node, the one its gold evidence names), by :class:`TextSizeError`
(:meth:`graphmem.builders.registry.Dataset.check_text_sizes`): one line naming the file, the record
and the field.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Protocol

from torch import Tensor

from graphmem.builders import hotpotqa, locomo
from graphmem.builders import passages as P
from graphmem.core.errors import InputError
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.hotpotqa import title_id
from graphmem.datasets.musique import passage_id
from graphmem.datasets.types import LoadReport, Question

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig
    from graphmem.builders.entities import EntityExtractor


class GraphUnit(NamedTuple):
    """One graph to build: its name, node texts (in node order) and ``build(embeddings, cfg, extractor)``."""

    name: str
    texts: list[str]
    build: Callable[[Tensor, "GraphConfig", "EntityExtractor"], MemoryGraph]


class PoolableDataset(Protocol):
    """What :func:`pooled_units` reads of a dataset's registry entry (:class:`graphmem.builders.registry.Dataset`)."""

    name: str
    passages: Callable[[Any], list] | None
    record_id: Callable[[Any], str]


class TextSizeError(ValueError, InputError):
    """A turn or passage field longer than ``GraphConfig.max_text_chars``; the message names file, record and field."""


def locomo_fields(conv, prefix: str = "conversation.", text: str = "text") -> Iterator[tuple[str, str]]:
    """``(field, text)`` of every text a LoCoMo conversation's turn nodes are made of; a REALTALK
    conversation's with ``prefix=""`` and ``text="clean_text"`` (its fields' names in the file)."""
    for t in conv.turns:
        where = f"{prefix}session_{t.session}[{t.position}] (dia_id {t.dia_id!r})"
        yield f"{where}: field 'speaker'", t.speaker
        yield f"{where}: field {text!r}", t.text
        yield f"{where}: field 'blip_caption'", t.image_caption or ""


def hotpot_fields(record) -> Iterator[tuple[str, str]]:
    """``(field, text)`` of every HotpotQA context paragraph: its title, and its sentences joined."""
    for p in record.paragraphs:
        yield f"context paragraph {p.title[:60]!r}: the title", p.title
        yield f"context paragraph {p.title[:60]!r}: the sentences joined", "".join(p.sentences)


def musique_fields(record) -> Iterator[tuple[str, str]]:
    """``(field, text)`` of every MuSiQue paragraph: its title and its text."""
    for j, p in enumerate(record.paragraphs):
        yield f"paragraphs[{j}]: field 'title'", p.title
        yield f"paragraphs[{j}]: field 'paragraph_text'", p.text


def pooled_name(path: str | Path, group: int | None = None) -> str:
    """Name of the pooled graph of a data file, ``pooled:<file stem>``, or of its records' group ``group``
    (``data.pool_size``), ``pooled:<file stem>:<group>``."""
    return f"pooled:{Path(path).stem}" + ("" if group is None else f":{group}")


def locomo_units(
    path: Path, records: list, questions: list[Question], report: LoadReport, cfg: GraphConfig, dataset: str = "locomo"
):
    """One turn graph per conversation (LoCoMo; REALTALK with ``dataset="realtalk"``), named by its ``sample_id``."""
    units = [
        GraphUnit(r.sample_id, locomo.node_texts(r), partial(locomo.build_locomo_graph, r, dataset=dataset))
        for r in records
    ]
    return units, questions


def hotpot_units(path: Path, records: list, questions: list[Question], report: LoadReport, cfg: GraphConfig):
    """One title-and-sentence graph per HotpotQA question."""
    units = [GraphUnit(r.qid, hotpotqa.node_texts(r), partial(hotpotqa.build_hotpot_graph, r)) for r in records]
    return units, questions


def twowiki_units(path: Path, records: list, questions: list[Question], report: LoadReport, cfg: GraphConfig):
    """HotpotQA's graphs (:func:`hotpot_units`) of 2Wiki records, their ``info["dataset"]`` set to ``2wiki``."""
    units, questions = hotpot_units(path, records, questions, report, cfg)
    return [u._replace(build=partial(_as_dataset, "2wiki", u.build)) for u in units], questions


def _as_dataset(name: str, build: Callable, *args) -> MemoryGraph:
    graph = build(*args)
    graph.info["dataset"] = name
    return graph


def musique_units(path: Path, records: list, questions: list[Question], report: LoadReport, cfg: GraphConfig):
    """One passage graph per MuSiQue question."""
    corpora = [
        P.corpus(r.qid, "musique", P.musique_passages(r), duplicate_titles=cfg.duplicate_titles) for r in records
    ]
    report.merged_titles += [f"{c.name}: {t} ({cfg.duplicate_titles})" for c in corpora for t in c.merged_titles]
    return [GraphUnit(c.name, P.node_texts(c, cfg), partial(P.build_passage_graph, c)) for c in corpora], questions


def pooled_units(
    path: Path,
    dataset: PoolableDataset,
    records: list,
    questions: list[Question],
    report: LoadReport,
    cfg: GraphConfig,
    pool_size: int | None = None,
):
    """One passage graph over the passages (``dataset.passages(record)``) of each group of ``pool_size``
    consecutive records, of all of them when ``pool_size`` is ``None`` (module docstring); each question is
    asked over its own record's group."""
    groups = [records]
    if pool_size is not None:
        groups = [records[i : i + pool_size] for i in range(0, len(records), pool_size)]
    units, graph_of = [], {}
    for k, group in enumerate(groups):
        name = pooled_name(path, None if pool_size is None else k)
        every = (p for r in group for p in dataset.passages(r))
        c = P.corpus(name, dataset.name, every, pooled=True, duplicate_titles=cfg.duplicate_titles)
        where = "" if pool_size is None else f"{name}: "
        report.merged_titles += [f"{where}{t} ({cfg.duplicate_titles})" for t in c.merged_titles]
        units.append(GraphUnit(c.name, P.node_texts(c, cfg), partial(P.build_passage_graph, c)))
        graph_of.update((dataset.record_id(r), name) for r in group)
    return units, [_pooled_question(q, graph_of[q.graph], dataset.name, cfg) for q in questions]


def _pooled_question(q: Question, graph: str, kind: str, cfg: GraphConfig) -> Question:
    """``q`` asked over the pooled ``graph``: HotpotQA's and 2Wiki's gold passages for its sentences when the
    graph has no sentence nodes, and 2Wiki's chain of title nodes as passages (a pooled graph has no title node)."""
    if kind not in ("hotpotqa", "2wiki"):
        return dataclasses.replace(q, graph=graph)

    evidence = q.evidence if cfg.sentence_nodes else tuple(passage_id(t) for t in q.support_titles)
    chain = tuple(passage_id(c.removesuffix(title_id(""))) for c in q.support_chain)
    return dataclasses.replace(q, graph=graph, evidence=evidence, support_chain=chain)
