"""The memory graph: shared nodes, directed multi-relational edges, Beta evidence and edge features.

Nodes carry a stable string id, the full text loaded into context, a short routing key, an
embedding, an optional timestamp (NaN when unknown) and free metadata. Edges are stored in COO
form; each directed edge ``(u, v)`` has

* a relation type (index into :attr:`MemoryGraph.relations`, HAGE's relation-specific views),
* Beta evidence counters ``S`` (helpful) and ``F`` (harmful), GraphMemory eq. 17-19, whose
  posterior mean ``w = (S + 1) / (S + F + 2)`` ranks the edge during BFS,
* a feature vector ``e_ij`` in R^4 (HAGE) and its Phase-1 value ``e_ij^0`` for the anchor term.

Every mutation validates its input first and raises :class:`GraphError` naming the node, edge
and field; :meth:`MemoryGraph.validate` checks the whole object (run on load).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor

from graphmem.core.csr import grow_rows, grown_rowptr, insertion_points, with_room
from graphmem.core.derived import DerivedTables

RELATIONS: tuple[str, ...] = ("temporal", "semantic", "causal", "entity")
NAME_KEYS = ("name", "sample_id", "graph")  # info keys that name a graph, in order
EDGE_FEATURE_DIM = 4
FEEDBACK_LABELS = ("helpful", "harmful", "neutral")


class GraphError(ValueError):
    """Invalid graph content or an invalid mutation; the message names the culprit."""


def _empty_edges() -> dict[str, Tensor]:
    return dict(
        edge_index=torch.empty(2, 0, dtype=torch.long),
        edge_type=torch.empty(0, dtype=torch.long),
        S=torch.empty(0, dtype=torch.float32),
        F=torch.empty(0, dtype=torch.float32),
        edge_attr=torch.empty(0, EDGE_FEATURE_DIM, dtype=torch.float32),
        edge_attr_init=torch.empty(0, EDGE_FEATURE_DIM, dtype=torch.float32),
    )


@dataclass
class MemoryGraph:
    """A directed multi-relational memory graph (see module docstring).

    Args:
        node_ids: stable unique node ids, length ``N``.
        texts: full node content, length ``N``.
        keys: short routing keys for the compact index, length ``N``.
        embeddings: ``[N, D]`` float32 node embeddings (L2-normalised by the builders).
        timestamps: ``[N]`` float64 POSIX seconds, NaN when unknown.
        metadata: one JSON-serialisable dict per node (speaker, session, dia_id, title, ...).
        edge_index: ``[2, E]`` long, row 0 source, row 1 target.
        edge_type: ``[E]`` long, index into ``relations``.
        S, F: ``[E]`` float32 helpful / harmful evidence (GraphMemory eq. 17-21).
        edge_attr: ``[E, 4]`` float32 trainable-feature values ``e_ij``.
        edge_attr_init: ``[E, 4]`` float32 Phase-1 values of ``e_ij``.
        relations: relation names (default: temporal, semantic, causal, entity).
        info: graph-level JSON metadata (dataset, sample id, builder settings).
    """

    node_ids: list[str]
    texts: list[str]
    keys: list[str]
    embeddings: Tensor
    timestamps: Tensor
    metadata: list[dict[str, Any]]
    edge_index: Tensor
    edge_type: Tensor
    S: Tensor
    F: Tensor
    edge_attr: Tensor
    edge_attr_init: Tensor
    relations: tuple[str, ...] = RELATIONS
    info: dict[str, Any] = field(default_factory=dict)
    derived: DerivedTables = field(default_factory=DerivedTables, repr=False, compare=False)
    """Tables derived from the graph, built and kept by the layer that owns each (:mod:`graphmem.core.derived`);
    every mutation through this class drops them."""
    node_log: list[tuple] = field(default_factory=list, repr=False, compare=False)
    """Append-only record of mutations, for structures kept across them (vector indexes, grown tables):
    ``("add", first row, count)``, ``("revise", row)`` (a new embedding), ``("text", row)`` (a new
    text), ``("meta", row)`` (a new key or metadata), ``("remove", rows)`` (ascending rows before the removal;
    later rows shift down), ``("edges",)`` (edges removed or edited; appended edges need no event:
    :meth:`appended_since`)."""
    indexes: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Vector and BM25 indexes by name (:mod:`graphmem.index.vector_index`, :mod:`graphmem.index.lexical`); unlike the
    derived tables they survive mutations and bring themselves up to date from :attr:`node_log`."""
    grown: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The last of some derived tables, by key, kept across mutations with the :meth:`log_mark` they were made at:
    the layer that owns one grows it when the graph has only grown since (:meth:`appended_since`)."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def empty(cls, dim: int, relations: Sequence[str] = RELATIONS, info: dict | None = None) -> MemoryGraph:
        """A graph with no nodes whose embeddings will have ``dim`` columns."""
        return cls(
            node_ids=[],
            texts=[],
            keys=[],
            embeddings=torch.empty(0, dim),
            timestamps=torch.empty(0, dtype=torch.float64),
            metadata=[],
            relations=tuple(relations),
            info=dict(info or {}),
            **_empty_edges(),
        )

    # ------------------------------------------------------------------ sizes and derived views
    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def name(self) -> str | None:
        """The graph's name from its ``info`` (``name``, ``sample_id`` or ``graph``), if any."""
        for key in NAME_KEYS:
            if isinstance(self.info.get(key), str):
                return self.info[key]
        return None

    @property
    def posterior_mean(self) -> Tensor:
        """Edge weight ``w_e = (S_e + 1) / (S_e + F_e + 2)`` (GraphMemory eq. 19)."""
        return (self.S + 1.0) / (self.S + self.F + 2.0)

    @property
    def version(self) -> int:
        """Goes up with every mutation through this class (:meth:`invalidate`)."""
        return self.derived.version

    def _rows(self) -> dict[str, int]:
        rows = self.derived.get("core.rows")
        if rows is None:
            rows = self.derived.put("core.rows", {n: i for i, n in enumerate(self.node_ids)})
        return rows

    def index_of(self, node_id: str) -> int:
        """Row of ``node_id``; raises :class:`GraphError` for an unknown id."""
        try:
            return self._rows()[node_id]
        except KeyError:
            raise GraphError(f"unknown node id {node_id!r}") from None

    def has_node(self, node_id: str) -> bool:
        return node_id in self._rows()

    def out_edges(self, node: int) -> Tensor:
        """Edge ids leaving row ``node`` (ordered by target; :func:`out_csr`)."""
        rowptr, perm = out_csr(self)
        return perm[rowptr[node] : rowptr[node + 1]]

    def edges_between(self, src: int, dst: int) -> Tensor:
        """Edge ids of all parallel edges ``src -> dst`` (any relation)."""
        out = self.out_edges(src)
        return out[self.edge_index[1, out] == dst]

    def invalidate(self) -> None:
        """Drop every derived table (:attr:`derived`); :attr:`version` goes up."""
        self.derived.clear()

    # ------------------------------------------------------------------ validation
    def validate(self) -> MemoryGraph:
        """Check every invariant; raise :class:`GraphError` naming node/edge and field. Returns self."""
        n = self.num_nodes
        for name in ("texts", "keys", "metadata"):
            if len(getattr(self, name)) != n:
                raise GraphError(f"field {name!r} has {len(getattr(self, name))} entries but there are {n} node ids")
        if len(set(self.node_ids)) != n:
            seen: set[str] = set()
            dup = next(x for x in self.node_ids if x in seen or seen.add(x))
            raise GraphError(f"node id {dup!r} is not unique")
        for i, (nid, text, key) in enumerate(zip(self.node_ids, self.texts, self.keys)):
            if not isinstance(nid, str) or not nid:
                raise GraphError(f"node {i}: field 'node_ids' must be a non-empty string, got {nid!r}")
            if not isinstance(text, str) or not isinstance(key, str):
                raise GraphError(f"node {nid!r}: fields 'texts' and 'keys' must be strings")
        if self.embeddings.dim() != 2 or self.embeddings.shape[0] != n:
            raise GraphError(f"field 'embeddings' has shape {tuple(self.embeddings.shape)}, expected [{n}, D]")
        if self.embeddings.dtype != torch.float32:
            raise GraphError(f"field 'embeddings' has dtype {self.embeddings.dtype}, expected float32")
        bad = (~torch.isfinite(self.embeddings)).any(1).nonzero().flatten()
        if bad.numel():
            raise GraphError(f"node {self.node_ids[int(bad[0])]!r}: field 'embeddings' holds NaN or inf")
        if self.timestamps.shape != (n,):
            raise GraphError(f"field 'timestamps' has shape {tuple(self.timestamps.shape)}, expected [{n}]")
        e = self.num_edges
        if self.edge_index.dim() != 2 or self.edge_index.shape[0] != 2 or self.edge_index.dtype != torch.long:
            raise GraphError(
                "field 'edge_index' must be a [2, E] long tensor, "
                f"got {tuple(self.edge_index.shape)} {self.edge_index.dtype}"
            )
        shapes = {
            "edge_type": (e,),
            "S": (e,),
            "F": (e,),
            "edge_attr": (e, EDGE_FEATURE_DIM),
            "edge_attr_init": (e, EDGE_FEATURE_DIM),
        }
        for name, shape in shapes.items():
            if tuple(getattr(self, name).shape) != shape:
                raise GraphError(
                    f"field {name!r} has shape {tuple(getattr(self, name).shape)}, expected {list(shape)} for {e} edges"
                )
        if e:
            out_of_range = ((self.edge_index < 0) | (self.edge_index >= n)).any(0).nonzero().flatten()
            if out_of_range.numel():
                j = int(out_of_range[0])
                raise GraphError(
                    f"edge {j} ({self.edge_index[0, j].item()} -> {self.edge_index[1, j].item()}): "
                    f"field 'edge_index' points to a missing node (graph has {n} nodes)"
                )
            bad_type = ((self.edge_type < 0) | (self.edge_type >= len(self.relations))).nonzero().flatten()
            if bad_type.numel():
                j = int(bad_type[0])
                raise GraphError(
                    f"edge {self._edge_name(j)}: field 'edge_type' = {int(self.edge_type[j])} "
                    f"is not one of {len(self.relations)} relations"
                )
            for name in ("S", "F"):
                t = getattr(self, name)
                bad = ((~torch.isfinite(t)) | (t < 0)).nonzero().flatten()
                if bad.numel():
                    j = int(bad[0])
                    raise GraphError(
                        f"edge {self._edge_name(j)}: field {name!r} = {float(t[j])} must be finite and >= 0"
                    )
            for name in ("edge_attr", "edge_attr_init"):
                bad = (~torch.isfinite(getattr(self, name))).any(1).nonzero().flatten()
                if bad.numel():
                    raise GraphError(f"edge {self._edge_name(int(bad[0]))}: field {name!r} holds NaN or inf")
        return self

    def _edge_name(self, j: int) -> str:
        u, v = int(self.edge_index[0, j]), int(self.edge_index[1, j])
        return f"{j} ({self.node_ids[u]!r} -> {self.node_ids[v]!r}, {self.relations[int(self.edge_type[j])]})"

    # ------------------------------------------------------------------ mutations
    def add_nodes(
        self,
        node_ids: Sequence[str],
        texts: Sequence[str],
        embeddings: Tensor,
        keys: Sequence[str] | None = None,
        timestamps: Sequence[float] | Tensor | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> Tensor:
        """Append nodes; returns their rows. Keys default to the first 12 words of the text."""
        k = len(node_ids)
        keys = list(keys) if keys is not None else [default_key(t) for t in texts]
        metadata = [dict(m) for m in metadata] if metadata is not None else [{} for _ in range(k)]
        ts = (
            torch.full((k,), math.nan, dtype=torch.float64)
            if timestamps is None
            else torch.as_tensor(timestamps, dtype=torch.float64)
        )
        embeddings = torch.as_tensor(embeddings, dtype=torch.float32)
        for name, seq in (("texts", texts), ("keys", keys), ("metadata", metadata)):
            if len(seq) != k:
                raise GraphError(f"add_nodes: field {name!r} has {len(seq)} entries for {k} node ids")
        if embeddings.shape != (k, self.dim):
            raise GraphError(
                f"add_nodes: field 'embeddings' has shape {tuple(embeddings.shape)}, expected [{k}, {self.dim}]"
            )
        if ts.shape != (k,):
            raise GraphError(f"add_nodes: field 'timestamps' has shape {tuple(ts.shape)}, expected [{k}]")
        existing = set(self.node_ids)
        for i, nid in enumerate(node_ids):
            if not isinstance(nid, str) or not nid:
                raise GraphError(f"add_nodes: node {i}: field 'node_ids' must be a non-empty string, got {nid!r}")
            if nid in existing:
                raise GraphError(f"add_nodes: node id {nid!r} already exists")
            existing.add(nid)
            if not isinstance(texts[i], str):
                raise GraphError(f"add_nodes: node {nid!r}: field 'texts' must be a string")
            if not torch.isfinite(embeddings[i]).all():
                raise GraphError(f"add_nodes: node {nid!r}: field 'embeddings' holds NaN or inf")
        start = self.num_nodes
        self.node_ids += list(node_ids)
        self.texts += list(texts)
        self.keys += keys
        self.metadata += metadata
        self.embeddings = torch.cat([self.embeddings, embeddings])
        self.timestamps = torch.cat([self.timestamps, ts])
        self.node_log.append(("add", start, k))
        self.invalidate()
        return torch.arange(start, start + k)

    def revise_node(
        self,
        node_id: str,
        text: str | None = None,
        key: str | None = None,
        embedding: Tensor | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Replace fields of one node in place (its edges and counters are kept)."""
        i = self.index_of(node_id)
        if text is not None and not isinstance(text, str):
            raise GraphError(f"revise_node: node {node_id!r}: field 'texts' must be a string")
        if embedding is not None:
            embedding = torch.as_tensor(embedding, dtype=torch.float32)
            if embedding.shape != (self.dim,) or not torch.isfinite(embedding).all():
                raise GraphError(f"revise_node: node {node_id!r}: field 'embeddings' must be {self.dim} finite floats")
            self.embeddings = self.embeddings.clone()
            self.embeddings[i] = embedding
            self.node_log.append(("revise", i))
        if text is not None:
            self.texts[i] = text
            self.node_log.append(("text", i))
        if key is not None:
            self.keys[i] = key
        if metadata is not None:
            self.metadata[i] = dict(metadata)
        if key is not None or metadata is not None:
            self.node_log.append(("meta", i))
        self.invalidate()

    def remove_nodes(self, node_ids: Iterable[str]) -> None:
        """Delete nodes and every edge touching them; remaining rows keep their order."""
        drop = torch.zeros(self.num_nodes, dtype=torch.bool)
        for nid in node_ids:
            drop[self.index_of(nid)] = True
        keep = (~drop).nonzero().flatten()
        new_row = torch.full((self.num_nodes,), -1, dtype=torch.long)
        new_row[keep] = torch.arange(keep.numel())
        edge_keep = ~(drop[self.edge_index[0]] | drop[self.edge_index[1]])
        self._select_edges(edge_keep)
        self.edge_index = new_row[self.edge_index]
        kept = keep.tolist()
        self.node_ids = [self.node_ids[i] for i in kept]
        self.texts = [self.texts[i] for i in kept]
        self.keys = [self.keys[i] for i in kept]
        self.metadata = [self.metadata[i] for i in kept]
        self.embeddings = self.embeddings[keep]
        self.timestamps = self.timestamps[keep]
        self.node_log.append(("remove", drop.nonzero().flatten().tolist()))
        self.invalidate()

    def add_edges(
        self,
        src: Tensor | Sequence[int],
        dst: Tensor | Sequence[int],
        relation: Tensor | Sequence[int] | str,
        features: Tensor | None = None,
        S: Tensor | None = None,
        F: Tensor | None = None,
    ) -> Tensor:
        """Append directed edges between existing rows; returns their edge ids.

        ``features`` default to the one-hot of the relation; counters default to ``S = F = 0``
        (GraphMemory eq. 17). The given features become both ``edge_attr`` and ``edge_attr_init``.
        """
        src = torch.as_tensor(src, dtype=torch.long).flatten()
        dst = torch.as_tensor(dst, dtype=torch.long).flatten()
        k = src.numel()
        if isinstance(relation, str):
            if relation not in self.relations:
                raise GraphError(f"add_edges: unknown relation {relation!r}; known: {list(self.relations)}")
            rel = torch.full((k,), self.relations.index(relation), dtype=torch.long)
        else:
            rel = torch.as_tensor(relation, dtype=torch.long).flatten()
        if dst.numel() != k or rel.numel() != k:
            raise GraphError(f"add_edges: src, dst and relation lengths differ ({k}, {dst.numel()}, {rel.numel()})")
        for name, idx in (("source", src), ("target", dst)):
            bad = ((idx < 0) | (idx >= self.num_nodes)).nonzero().flatten()
            if bad.numel():
                raise GraphError(
                    f"add_edges: edge {int(bad[0])}: {name} row {int(idx[bad[0]])} is not a node "
                    f"(graph has {self.num_nodes})"
                )
        bad = ((rel < 0) | (rel >= len(self.relations))).nonzero().flatten()
        if bad.numel():
            raise GraphError(
                f"add_edges: edge {int(bad[0])}: relation {int(rel[bad[0]])} "
                f"is not one of {len(self.relations)} relations"
            )
        if features is None:
            features = torch.nn.functional.one_hot(rel.clamp(max=EDGE_FEATURE_DIM - 1), EDGE_FEATURE_DIM).float()
        features = torch.as_tensor(features, dtype=torch.float32)
        if features.shape != (k, EDGE_FEATURE_DIM) or not torch.isfinite(features).all():
            raise GraphError(
                f"add_edges: field 'edge_attr' must be [{k}, {EDGE_FEATURE_DIM}] finite floats, "
                f"got {tuple(features.shape)}"
            )
        counters = []
        for name, c in (("S", S), ("F", F)):
            c = torch.zeros(k) if c is None else torch.as_tensor(c, dtype=torch.float32).flatten()
            if c.shape != (k,) or not torch.isfinite(c).all() or (c < 0).any():
                raise GraphError(f"add_edges: field {name!r} must be {k} finite non-negative floats")
            counters.append(c)
        start = self.num_edges
        self.edge_index = torch.cat([self.edge_index, torch.stack([src, dst])], 1)
        self.edge_type = torch.cat([self.edge_type, rel])
        self.S = torch.cat([self.S, counters[0]])
        self.F = torch.cat([self.F, counters[1]])
        self.edge_attr = torch.cat([self.edge_attr, features])
        self.edge_attr_init = torch.cat([self.edge_attr_init, features.clone()])
        self.invalidate()
        return torch.arange(start, start + k)

    def add_edge(self, src_id: str, dst_id: str, relation: str, features: Sequence[float] | None = None) -> int:
        """Add one edge between node ids (refused when either node is missing)."""
        for role, nid in (("source", src_id), ("target", dst_id)):
            if not self.has_node(nid):
                raise GraphError(f"add_edge: {role} node {nid!r} does not exist")
        feats = None if features is None else torch.tensor([list(features)], dtype=torch.float32)
        return int(self.add_edges([self.index_of(src_id)], [self.index_of(dst_id)], relation, feats)[0])

    def remove_edges(self, edge_ids: Tensor | Sequence[int]) -> None:
        """Delete edges by id."""
        ids = torch.as_tensor(edge_ids, dtype=torch.long).flatten()
        bad = ((ids < 0) | (ids >= self.num_edges)).nonzero().flatten()
        if bad.numel():
            raise GraphError(
                f"remove_edges: edge id {int(ids[bad[0]])} does not exist (graph has {self.num_edges} edges)"
            )
        keep = torch.ones(self.num_edges, dtype=torch.bool)
        keep[ids] = False
        self._select_edges(keep)
        self.invalidate()

    def _select_edges(self, keep: Tensor) -> None:
        for name in ("edge_type", "S", "F", "edge_attr", "edge_attr_init"):
            setattr(self, name, getattr(self, name)[keep])
        self.edge_index = self.edge_index[:, keep]
        self.node_log.append(("edges",))

    # ------------------------------------------------------------------ growth
    def log_mark(self) -> tuple[int, int, int]:
        """``(log length, nodes, edges)`` now: what :meth:`appended_since` compares a later graph with."""
        return len(self.node_log), self.num_nodes, self.num_edges

    def appended_since(self, mark: tuple[int, int, int]) -> bool:
        """Whether the graph has grown, and only grown, since ``mark`` (:meth:`log_mark`): it holds more nodes or
        edges, every logged event after the mark adds rows after the last, and the edges then held are still the
        first ones (none logged removed or edited). A table kept across mutations may then be extended instead
        of made again. A graph that did not grow changed in some other way (a field assigned or edited in
        place: such a change made together with an append is outside this contract, as for the vector
        indexes)."""
        at, n, e = mark
        if e > self.num_edges or (n, e) == (self.num_nodes, self.num_edges):
            return False
        return self.rows_appended_since(at, n, ())

    def rows_appended_since(self, at: int, rows: int, keeps: tuple[str, ...]) -> bool:
        """Whether the log after its entry ``at`` takes the graph from ``rows`` nodes to the ones it holds by appends
        only, every other event being one of ``keeps`` (the events that leave what the caller reads of each row as
        it was): a per-row table of the first ``rows`` nodes made at entry ``at`` then needs only the new rows."""
        if at > len(self.node_log):
            return False
        for event in self.node_log[at:]:
            if event[0] == "add" and event[1] == rows:
                rows += event[2]
            elif event[0] not in keeps:
                return False
        return rows == self.num_nodes

    def observe(self, src_id: str, dst_id: str, label: str, confidence: float) -> int:
        """Apply one labelled transition to the counters of edges ``src -> dst`` (GraphMemory eq. 21).

        ``helpful`` adds ``c`` to ``S``, ``harmful`` adds ``c`` to ``F``, ``neutral`` changes nothing.
        All parallel edges ``src -> dst`` (any relation) are updated; a missing edge is never
        created. Returns the number of edges updated.
        """
        if label not in FEEDBACK_LABELS:
            raise GraphError(f"observe: label {label!r} is not one of {FEEDBACK_LABELS}")
        if not (isinstance(confidence, (int, float)) and 0.0 <= confidence <= 1.0):
            raise GraphError(f"observe: confidence {confidence!r} is outside [0, 1]")
        edges = self.edges_between(self.index_of(src_id), self.index_of(dst_id))
        if label == "neutral" or confidence == 0 or edges.numel() == 0:
            return 0
        counter = self.S if label == "helpful" else self.F
        counter[edges] += float(confidence)
        self.invalidate()
        return int(edges.numel())

    # ------------------------------------------------------------------ copies
    def copy(self) -> MemoryGraph:
        """A deep copy (tensors cloned)."""
        return MemoryGraph(
            node_ids=list(self.node_ids),
            texts=list(self.texts),
            keys=list(self.keys),
            embeddings=self.embeddings.clone(),
            timestamps=self.timestamps.clone(),
            metadata=[dict(m) for m in self.metadata],
            edge_index=self.edge_index.clone(),
            edge_type=self.edge_type.clone(),
            S=self.S.clone(),
            F=self.F.clone(),
            edge_attr=self.edge_attr.clone(),
            edge_attr_init=self.edge_attr_init.clone(),
            relations=tuple(self.relations),
            info=dict(self.info),
        )


def out_csr(graph: MemoryGraph) -> tuple[Tensor, Tensor]:
    """Out-neighbour access: ``(rowptr [N+1], perm [E])``, kept in ``graph.derived``.

    The out-edges of node ``i`` are edge ids ``perm[rowptr[i]:rowptr[i+1]]``, ordered by target.

    The last one made is kept across mutations (``graph.grown``): when the graph has only grown since
    (:meth:`MemoryGraph.appended_since`), the new edges are merged into it instead of sorting every edge again.
    """
    table = graph.derived.get("core.csr")
    if table is None:
        held = graph.grown.pop("core.csr", None)
        if held is not None and graph.appended_since(held[0]):
            e0, rowptr, parts = held[0][2], held[1][0], {"perm": held[1][1]}
            held = None  # ``parts`` is the earlier perm's last hold: it grows in place when no one else reads it
            table = _grown_csr(graph, rowptr, parts, e0)
        else:
            src, dst = graph.edge_index
            perm = with_room(torch.argsort(src * max(graph.num_nodes, 1) + dst, stable=True))  # grows in place
            rowptr = torch.zeros(graph.num_nodes + 1, dtype=torch.long)
            rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=graph.num_nodes), 0)
            table = (rowptr, perm)
        graph.grown["core.csr"] = (graph.log_mark(), table)
        table = graph.derived.put("core.csr", table)
    return table


def _grown_csr(graph: MemoryGraph, rowptr: Tensor, held: dict[str, Tensor], e0: int) -> tuple[Tensor, Tensor]:
    """:func:`out_csr` of ``graph`` from ``rowptr`` and ``held["perm"]`` (taken out of ``held``), that of its first
    ``e0`` edges and ``len(rowptr) - 1`` nodes: each new edge goes after the edges of its source with a target not
    larger (the stable sort's order)."""
    n = graph.num_nodes
    src, dst = graph.edge_index[:, e0:]
    order = torch.argsort(src * max(n, 1) + dst, stable=True)
    at = insertion_points(rowptr, graph.edge_index[1], src[order], dst[order], ties_after=True, perm=held["perm"])
    return grown_rowptr(rowptr, src, n), grow_rows(held, "perm", at, order + e0)


def edge_table(graph: MemoryGraph) -> list[tuple]:
    """Every edge as ``(source id, target id, relation, features, initial features, S, F)``, sorted: two graphs
    with the same nodes hold the same edges, features and counters exactly when their tables are equal."""
    ids, rel = graph.node_ids, graph.relations
    columns = (graph.edge_index[0], graph.edge_index[1], graph.edge_type, graph.edge_attr, graph.edge_attr_init)
    return sorted(
        (ids[s], ids[d], rel[r], tuple(a), tuple(a0), sf, ff)
        for (s, d, r, a, a0), sf, ff in zip(zip(*(c.tolist() for c in columns)), graph.S.tolist(), graph.F.tolist())
    )


def default_key(text: str, words: int = 12) -> str:
    """Short routing key: the first ``words`` words of the text."""
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")
