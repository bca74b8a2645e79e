"""The batch builder's rules applied one record at a time, at a cost that does not grow with the memory.

A live memory (:class:`graphmem.memory.Memory`) receives turns or passages one by one. A batch rule
that reads records which have not arrived yet is replaced by its arrival-order form, and the batch
builder offers the same form (``GraphConfig.incremental``), so that a memory grown record by record
and a graph built at once from the same records are equal (``tests/test_memory_equivalence.py``).
For record ``j`` (row ``j``, rows in arrival order):

* **temporal**: the previous record of its session, and the ``temporal_cap`` nearest-in-time earlier
  records with ``|t_i - t_j| <= temporal_window_s`` (not the previous record; equal gaps to the lower
  row). The candidates come from a sorted time index, so the cost is the window's records, not ``N``.
* **semantic**: the ``semantic_k`` most cosine-similar earlier records with cosine ``>=
  semantic_threshold`` (equal cosines to the lower row), from the memory's neighbour search (exact
  below a size, an HNSW index above it).
* **entity**: the record's entities, extracted with the vocabulary of the records so far
  (:func:`~graphmem.builders.entities.extract_one`); for each entity, its ``q``-th mention links to the
  ``entity_fanout`` mentions before it while ``q <= max(10, entity_max_share * (j + 1))``.
* **causal**: the question -> answer and connective cues between the previous record of the session and
  this one (:func:`~graphmem.builders.edges.causal_pairs`).

Every new edge is inserted in both directions with its Phase-1 features ``[p_t, p_s, p_c, p_e]``
(:mod:`graphmem.builders.edges`) and Beta counters at the prior ``S = F = 0`` (GraphMemory eq. 17).

:func:`records_of` turns a built graph back into the records that regrow its nodes, so that a saved graph can
seed a live memory; the memory's edges are then those of these rules, whatever rules built the graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
from sortedcontainers import SortedList
from torch import Tensor

from graphmem.builders import edges as E
from graphmem.builders.config import GraphConfig
from graphmem.builders.entities import EntityExtractor, extract_one
from graphmem.core.graph import MemoryGraph, default_key

Neighbours = Callable[[Tensor, int, int], tuple[list[int], list[float]]]
"""``neighbours(x, k, n)``: the rows among the first ``n`` whose embeddings are nearest ``x`` (unit),
and their cosines, most similar first, equal cosines to the lower row, at most ``k``."""


@dataclass(frozen=True)
class Record:
    """One turn or passage as a live memory receives it.

    Args:
        id: the node id (unique in the memory).
        text: the record's words; the node's text is ``"<speaker>: <text>"`` when a speaker is given.
        speaker: who said it (conversations), else ``None``.
        time: POSIX seconds, ``None`` when unknown.
        session: the sequence it continues (a conversation session, a document); ``None``: none.
        meta: free JSON metadata kept on the node.
        key: the node's short routing key (default: ``"<speaker>: "`` and its first ten words, or its first twelve).
        speaker_in_text: whether the node's text starts with ``"<speaker>: "`` (``False``: the speaker is in the
            metadata only, as a REALTALK handle is) (default: ``True``).
    """

    id: str
    text: str
    speaker: str | None = None
    time: float | None = None
    session: str | int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None
    speaker_in_text: bool = True

    @property
    def node_text(self) -> str:
        return f"{self.speaker}: {self.text}" if self.speaker and self.speaker_in_text else self.text

    @property
    def routing_key(self) -> str:
        if self.key is not None:
            return self.key
        return f"{self.speaker}: {default_key(self.text, 10)}" if self.speaker else default_key(self.text)


@dataclass
class Plan:
    """What adding one record changes: its node's metadata and entities, the proper words it adds to the
    extractor's vocabulary, and its new edges (both directions)."""

    metadata: dict[str, Any]
    entities: set[str]
    words: set[str]
    src: Tensor
    dst: Tensor
    relation: Tensor
    features: Tensor | None


def records_of(graph: MemoryGraph) -> list[Record]:
    """The records that regrow ``graph``'s nodes in a live memory, in row order: id, text, key, time and metadata.

    A node's ``speaker`` and ``session`` metadata become the record's fields, and its text loses the
    ``"<speaker>: "`` prefix the record puts back; the rest of its metadata (``position`` included) is the
    record's ``meta``, and an unknown time (NaN) is ``None``. A speaker whose node text does not carry the prefix
    stays in ``meta``, so that the node text is regrown as it is."""
    out = []
    for i, nid in enumerate(graph.node_ids):
        meta, text = dict(graph.metadata[i]), graph.texts[i]
        speaker, session = meta.get("speaker"), meta.pop("session", None)
        if speaker and text.startswith(f"{speaker}: "):
            text = text[len(speaker) + 2 :]
            del meta["speaker"]
        else:
            speaker = None
        t = float(graph.timestamps[i])
        out.append(Record(nid, text, speaker, t if math.isfinite(t) else None, session, meta, graph.keys[i]))
    return out


class TimeIndex:
    """Rows by timestamp, for the time-window candidates of an arriving record: ``(t, row)`` keys in a sorted list
    of bounded blocks (``sortedcontainers.SortedList``), so that a record whose time falls before the latest (a
    back-filled or late turn) is inserted in ``O(log N)`` rather than by moving every later key."""

    def __init__(self, keys: Iterable[tuple[float, int]] = ()) -> None:
        self._keys = SortedList(k for k in keys if math.isfinite(k[0]))

    @classmethod
    def of(cls, times: Tensor) -> TimeIndex:
        """The index of rows ``0..N-1`` at ``times`` ``[N]`` (unknown times, NaN, left out), sorted once."""
        return cls(zip(times.tolist(), range(times.numel())))

    def add(self, t: float, row: int) -> None:
        if math.isfinite(t):
            self._keys.add((t, row))

    def keys(self) -> list[tuple[float, int]]:
        """Every ``(t, row)``, by time then row."""
        return list(self._keys)

    def within(self, t: float, window: float) -> list[tuple[float, int]]:
        """``(|t_i - t|, row)`` of the rows with ``|t_i - t| <= window``, nearest first, then by row."""
        near = self._keys.irange((t - window, -1), (t + window, math.inf))
        return sorted((abs(ti - t), row) for ti, row in near if abs(ti - t) <= window)

    def remove(self, rows: set[int], new_row: Mapping[int, int]) -> None:
        """Drop ``rows`` and renumber the others (after a deletion compacts the graph)."""
        self._keys = SortedList((t, new_row[r]) for t, r in self._keys if r not in rows)


class EntityIndex:
    """Mentions of each entity, in arrival order: the entity edges' state."""

    def __init__(self) -> None:
        self.mentions: dict[str, list[int]] = {}

    def link(self, row: int, entities: set[str], fanout: int, max_share: float) -> list[int]:
        """Record ``row``'s mentions; returns the earlier rows it links to (module docstring's rule)."""
        out: list[int] = []
        for e in sorted(entities):
            rows = self.mentions.setdefault(e, [])
            if len(rows) + 1 <= max(10.0, max_share * (row + 1)):
                out += rows[max(0, len(rows) - fanout) :]
            rows.append(row)
        return out

    def remove(self, rows: set[int], new_row: Mapping[int, int]) -> None:
        for e in list(self.mentions):
            kept = [new_row[r] for r in self.mentions[e] if r not in rows]
            if kept:
                self.mentions[e] = kept
            else:
                del self.mentions[e]


class IncrementalBuilder:
    """Plans the node metadata and edges of each arriving record (module docstring).

    Args:
        cfg: the graph config (``configs/graph``), the batch builder's settings.
        extractor: the entity extractor (``cfg.entity_extractor`` made by the caller).
        neighbours: the semantic neighbour search over the rows already present (:data:`Neighbours`).
    """

    def __init__(self, cfg: GraphConfig, extractor: EntityExtractor, neighbours: Neighbours) -> None:
        self.cfg, self.extractor, self.neighbours = cfg, extractor, neighbours
        self.vocabulary: set[str] = set()
        self.times = TimeIndex()
        self.entities = EntityIndex()
        self.tails: dict[Any, tuple[int, int]] = {}  # session -> (row, position) of its last record
        self.node_entities: list[set[str]] = []

    def replay(self, graph: MemoryGraph, entities: list[set[str]], vocabulary: set[str]) -> None:
        """Bring the state up to ``graph`` (a memory reopened from its store): its rows in order, their
        stored entities and the extractor's vocabulary."""
        self.vocabulary = set(vocabulary)
        self.times = TimeIndex.of(graph.timestamps)
        for row, (m, ents) in enumerate(zip(graph.metadata, entities, strict=True)):
            self._remember(row, m, ents)
            for e in sorted(ents):
                self.entities.mentions.setdefault(e, []).append(row)

    def _remember(self, row: int, metadata: Mapping[str, Any], ents: set[str]) -> None:
        if metadata.get("session") is not None:
            self.tails[metadata["session"]] = (row, int(metadata["position"]))
        self.node_entities.append(ents)

    def metadata(self, record: Record) -> dict[str, Any]:
        """The node metadata of ``record``: speaker, session and position (the next of its session), its meta."""
        out: dict[str, Any] = {**dict(record.meta)}
        if record.speaker is not None:
            out["speaker"] = record.speaker
        if record.session is not None:
            tail = self.tails.get(record.session)
            out.setdefault("position", tail[1] + 1 if tail else 0)
            out["session"] = record.session
        return out

    def plan(self, graph: MemoryGraph, record: Record, metadata: dict[str, Any]) -> Plan:
        """The edges of ``record``, already appended to ``graph`` as its last row, with ``metadata``."""
        cfg, j = self.cfg, graph.num_nodes - 1
        entities, words = extract_one(self.extractor, record.text, self.vocabulary)
        self.vocabulary |= words
        pred = self.tails.get(record.session) if record.session is not None else None
        pred_row = pred[0] if pred else None
        t = float(graph.timestamps[j])
        pairs: dict[str, list[int]] = {r: [] for r in ("temporal", "semantic", "causal", "entity")}
        if pred_row is not None:
            pairs["temporal"].append(pred_row)
        if cfg.temporal_window_s > 0 and cfg.temporal_cap > 0 and math.isfinite(t):
            near = [row for _, row in self.times.within(t, cfg.temporal_window_s) if row != pred_row]
            pairs["temporal"] += near[: cfg.temporal_cap]
        if cfg.semantic_k > 0 and j > 0:
            rows, cos = self.neighbours(graph.embeddings[j], cfg.semantic_k, j)
            pairs["semantic"] = [r for r, c in zip(rows, cos) if c >= cfg.semantic_threshold]
        conf = 0.0
        if pred_row is not None:
            # the previous record's cue is whether its text ends with "?": its node text ends as its words do
            cues = [graph.texts[pred_row], record.text]
            speakers = [graph.metadata[pred_row].get("speaker"), record.speaker]
            qa, connective = cfg.causal_qa_confidence, cfg.causal_connective_confidence
            _, _, c = E.causal_pairs(cues, speakers, [0, 0], [0, 1], qa, connective)
            if c.numel():
                conf = float(c[0])
                pairs["causal"].append(pred_row)
        pairs["entity"] = self.entities.link(j, entities, cfg.entity_fanout, cfg.entity_max_share)
        self.times.add(t, j)
        self._remember(j, metadata, entities)
        src, dst, rel = [], [], []
        for relation, rows in pairs.items():
            for i in sorted(set(rows)):
                src += [i, j]
                dst += [j, i]
                rel += [graph.relations.index(relation)] * 2
        src_t, dst_t = torch.tensor(src, dtype=torch.long), torch.tensor(dst, dtype=torch.long)
        rel_t = torch.tensor(rel, dtype=torch.long)
        feats = self._features(graph, src_t, dst_t, pred_row, conf) if cfg.features == "scored" else None
        return Plan(metadata, entities, words, src_t, dst_t, rel_t, feats)

    def _features(self, graph: MemoryGraph, src: Tensor, dst: Tensor, pred: int | None, conf: float) -> Tensor:
        """``[p_t, p_s, p_c, p_e]`` of the new edges, as :func:`graphmem.builders.edges.phase1_features` gives them."""
        if src.numel() == 0:
            return torch.empty(0, 4)
        rows = sorted(set(src.tolist()) | set(dst.tolist()))
        local = {r: i for i, r in enumerate(rows)}
        group, order = E.sequence_positions_of([graph.metadata[r] for r in rows], rows)
        ls, ld = torch.tensor([local[r] for r in src.tolist()]), torch.tensor([local[r] for r in dst.tolist()])
        emb = graph.embeddings
        causal = (
            (torch.tensor([pred]), torch.tensor([graph.num_nodes - 1]), torch.tensor([conf]))
            if pred is not None and conf > 0
            else (torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), torch.empty(0))
        )
        return torch.stack(
            [
                E.temporal_proximity(group, order, ls, ld, self.cfg.temporal_tau),
                (emb[src] * emb[dst]).sum(1).clamp(-1.0, 1.0),
                E.lookup_pairs(graph.num_nodes, *causal, src, dst),
                E.jaccard(self.node_entities, src, dst),
            ],
            dim=1,
        )

    def forget(self, rows: set[int], new_row: Mapping[int, int], metadata: list[Mapping[str, Any]]) -> None:
        """Drop deleted ``rows`` from the state and renumber the rest (``new_row``: old row -> new row), as replaying
        the remaining rows gives it; ``metadata`` is the remaining rows' (in their new order): a session whose last
        record was deleted continues from its last remaining one."""
        self.times.remove(rows, new_row)
        self.entities.remove(rows, new_row)
        cut = {s for s, (r, _) in self.tails.items() if r in rows}
        self.tails = {s: (new_row[r], p) for s, (r, p) in self.tails.items() if r not in rows}
        for row in range(len(metadata) - 1, -1, -1) if cut else ():
            session = metadata[row].get("session")
            if session in cut:
                self.tails[session] = (row, int(metadata[row]["position"]))
                cut.discard(session)
                if not cut:
                    break
        self.node_entities = [e for i, e in enumerate(self.node_entities) if i not in rows]


NODE_FIELDS = ("speaker", "session", "position")
"""metadata a memory sets itself (:meth:`IncrementalBuilder.metadata`), so a record does not carry it"""


def graph_records(graph: MemoryGraph) -> list[Record]:
    """The records of ``graph`` in node order, as a live memory would have received them: id, the node's words
    (its text without the ``"<speaker>: "`` prefix), speaker, time (``None`` when unknown), session, the other
    metadata and its key (a speaker that is not in the text stays out of it). A memory grown from them by the
    incremental rules is the graph built with ``graph.incremental``."""
    out = []
    for i, (nid, text, meta) in enumerate(zip(graph.node_ids, graph.texts, graph.metadata)):
        meta = dict(meta or {})
        speaker, session = meta.get("speaker"), meta.get("session")
        prefixed = bool(speaker) and text.startswith(f"{speaker}: ")
        body = text[len(speaker) + 2 :] if prefixed else text
        t = float(graph.timestamps[i])
        extra = {k: v for k, v in meta.items() if k not in NODE_FIELDS}
        time = None if math.isnan(t) else t
        out.append(Record(nid, body, speaker, time, session, extra, graph.keys[i], prefixed or not speaker))
    return out
