"""Edge helpers shared by the builders: candidate pairs per relation and Phase-1 edge features.

Every helper returns undirected candidate pairs as two long tensors ``(a, b)`` with ``a != b``;
:func:`add_relation_edges` inserts both directions. Phase-1 features (HAGE §3) of an edge
``i -> j``, computed for every edge whatever its relation:

* temporal proximity ``p_t = exp(-(|o_i - o_j| - 1) / tau)`` when ``i, j`` share a sequence group
  (session, paragraph) and have orders ``o``; 0 otherwise or when unknown,
* semantic cosine ``p_s = <x_i, x_j>`` of the unit embeddings,
* causal confidence ``p_c`` from :func:`causal_pairs` (0 when no cue links the pair),
* entity overlap ``p_e = |E_i ∩ E_j| / |E_i ∪ E_j|`` (Jaccard; 0 when both sets are empty).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig

CONNECTIVES = re.compile(
    r"\b(because|therefore|thus|hence|consequently|as a result|that's why|that is why|which is why|due to|"
    r"led to|leads to|caused|causes|so that|since then|in order to|so)\b",
    re.IGNORECASE,
)
_STRONG = re.compile(r"\b(because|therefore|thus|hence|consequently|as a result|due to|caused|causes)\b", re.IGNORECASE)


def _pairs(a: list[int] | Tensor, b: list[int] | Tensor) -> tuple[Tensor, Tensor]:
    return torch.as_tensor(a, dtype=torch.long).flatten(), torch.as_tensor(b, dtype=torch.long).flatten()


def sequence_pairs(group: Sequence, order: Sequence[int]) -> tuple[Tensor, Tensor]:
    """Consecutive nodes: ``(i, j)`` with equal group and ``order_j`` the next order after ``order_i``."""
    idx = sorted(range(len(order)), key=lambda i: (str(group[i]), order[i]))
    a = [i for i, j in zip(idx, idx[1:]) if group[i] == group[j] and group[i] is not None]
    b = [j for i, j in zip(idx, idx[1:]) if group[i] == group[j] and group[i] is not None]
    return _pairs(a, b)


def time_window_pairs(
    timestamps: Tensor,
    window: float,
    cap: int,
    exclude: tuple[Tensor, Tensor] | None = None,
    earlier_only: bool = False,
) -> tuple[Tensor, Tensor]:
    """Each node to at most ``cap`` nearest-in-time other nodes with ``|t_i - t_j| <= window``.

    Pairs in ``exclude`` (e.g. the consecutive pairs, already linked) are not counted against the cap.
    ``earlier_only`` (the live memory's rule): node ``i`` looks only at rows ``j < i``, nearest first and
    equal gaps to the lower row, as :meth:`graphmem.builders.incremental.IncrementalBuilder.plan` does for one node.
    """
    n = timestamps.numel()
    if n < 2 or cap == 0 or window <= 0:
        return _pairs([], [])
    t = timestamps.double()
    dt = (t[:, None] - t[None, :]).abs()
    dt[~torch.isfinite(dt)] = float("inf")
    dt.fill_diagonal_(float("inf"))
    dt[dt > window] = float("inf")
    if exclude is not None and exclude[0].numel():
        dt[exclude[0], exclude[1]] = float("inf")
        dt[exclude[1], exclude[0]] = float("inf")
    if earlier_only:
        dt[torch.ones(n, n, dtype=torch.bool).triu()] = float("inf")
        vals, nbr = torch.sort(dt, dim=1, stable=True)
        vals, nbr = vals[:, :cap], nbr[:, :cap]
    else:
        vals, nbr = torch.topk(dt, min(cap, n - 1), dim=1, largest=False)
    keep = torch.isfinite(vals)
    rows = torch.arange(n)[:, None].expand_as(nbr)
    return rows[keep], nbr[keep]


def semantic_knn_pairs(
    embeddings: Tensor, k: int, threshold: float, block: int = 2048, earlier_only: bool = False
) -> tuple[Tensor, Tensor]:
    """Each node to its ``k`` most cosine-similar other nodes with similarity ``>= threshold``.

    Similarities are computed ``block`` rows at a time, so a pooled corpus of 10^4 nodes never
    holds the full ``[N, N]`` matrix. ``earlier_only`` (the live memory's rule): node ``i`` looks only at
    rows ``j < i``, equal cosines to the lower row, as :meth:`graphmem.builders.incremental.IncrementalBuilder.plan`
    does for one node.
    """
    n = embeddings.shape[0]
    if n < 2 or k == 0:
        return _pairs([], [])
    rows_out, nbr_out = [], []
    for start in range(0, n, block):
        local = torch.arange(min(block, n - start))
        if earlier_only:  # cosines in float64 rounded to float32: the same values as the one-node search
            sim = (embeddings[start : start + block].double() @ embeddings.double().T).float()
            sim[torch.arange(n)[None, :] >= (local + start)[:, None]] = -float("inf")
            vals, nbr = torch.sort(sim, dim=1, descending=True, stable=True)
            vals, nbr = vals[:, :k], nbr[:, :k]
        else:
            sim = embeddings[start : start + block] @ embeddings.T
            sim[local, local + start] = -float("inf")
            vals, nbr = torch.topk(sim, min(k, n - 1), dim=1)
        keep = vals >= threshold
        rows_out.append((local + start)[:, None].expand_as(nbr)[keep])
        nbr_out.append(nbr[keep])
    return torch.cat(rows_out), torch.cat(nbr_out)


def entity_pairs(
    entities: Sequence[set[str]], fanout: int, max_share: float, at_arrival: bool = False
) -> tuple[Tensor, Tensor]:
    """Nodes mentioning the same entity, without cliques.

    The mentions of an entity, in node order, are linked each to the next ``fanout`` mentions
    (so an entity adds at most ``fanout`` pairs per mention). An entity mentioned by more than
    ``max(10, max_share * N)`` nodes is skipped as too common to discriminate. ``at_arrival`` (the live
    memory's rule): the cap is applied as each mention arrives, with the mentions and nodes seen so far: the
    ``q``-th mention (1-based) of an entity, at row ``r``, links to the ``fanout`` mentions before it when
    ``q <= max(10, max_share * (r + 1))``, as :meth:`graphmem.builders.incremental.EntityIndex.link` does.
    """
    mentions: dict[str, list[int]] = {}
    for i, ents in enumerate(entities):
        for e in ents:
            mentions.setdefault(e, []).append(i)
    limit = max(10.0, max_share * len(entities))
    a: list[int] = []
    b: list[int] = []
    for e in sorted(mentions):
        rows = mentions[e]
        if at_arrival:
            for q, j in enumerate(rows):
                if q + 1 <= max(10.0, max_share * (j + 1)):
                    a += rows[max(0, q - fanout) : q]
                    b += [j] * (q - max(0, q - fanout))
            continue
        if len(rows) < 2 or len(rows) > limit:
            continue
        for pos, i in enumerate(rows):
            for j in rows[pos + 1 : pos + 1 + fanout]:
                a.append(i)
                b.append(j)
    return _pairs(a, b)


def causal_pairs(
    texts: Sequence[str],
    speakers: Sequence[str | None],
    group: Sequence,
    order: Sequence[int],
    qa_confidence: float,
    connective_confidence: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Offline causal cues between consecutive nodes ``i -> j`` of a group; returns ``(a, b, confidence)``.

    Cues: *question -> answer* (``text_i`` ends with ``?`` and ``j`` is said by another speaker,
    weight ``qa_confidence``); *connective* (``text_j`` contains because/therefore/so/since
    then/..., weight ``connective_confidence``, halved for the weak ones ``so``/``in order to``/...).
    Confidence ``c = 1 - prod(1 - w)`` over the cues present.
    """
    a, b = sequence_pairs(group, order)
    conf = []
    for i, j in zip(a.tolist(), b.tolist()):
        miss = 1.0
        if texts[i].rstrip().endswith("?") and speakers[i] is not None and speakers[i] != speakers[j]:
            miss *= 1.0 - qa_confidence
        if CONNECTIVES.search(texts[j]):
            miss *= 1.0 - (connective_confidence if _STRONG.search(texts[j]) else connective_confidence / 2)
        conf.append(1.0 - miss)
    c = torch.tensor(conf, dtype=torch.float32)
    keep = c > 0
    return a[keep], b[keep], c[keep]


def temporal_proximity(group: Sequence, order: Sequence[int], src: Tensor, dst: Tensor, tau: float) -> Tensor:
    """``p_t`` of the module docstring for each edge ``src -> dst``."""
    codes: dict = {}
    g = torch.tensor([-1 if x is None else codes.setdefault(x, len(codes)) for x in group], dtype=torch.long)
    o = torch.as_tensor(list(order), dtype=torch.float32)
    same = (g[src] == g[dst]) & (g[src] >= 0)
    gap = (o[src] - o[dst]).abs()
    return torch.where(same, torch.exp(-(gap - 1).clamp(min=0) / tau), torch.zeros_like(gap))


def jaccard(entities: Sequence[set[str]], src: Tensor, dst: Tensor) -> Tensor:
    """``p_e`` of the module docstring for each edge ``src -> dst``."""
    out = []
    for i, j in zip(src.tolist(), dst.tolist()):
        union = len(entities[i] | entities[j])
        out.append(len(entities[i] & entities[j]) / union if union else 0.0)
    return torch.tensor(out, dtype=torch.float32)


def lookup_pairs(n: int, a: Tensor, b: Tensor, values: Tensor, src: Tensor, dst: Tensor) -> Tensor:
    """Value of the unordered pair ``{src, dst}`` in the table ``(a, b) -> values`` (0 when absent)."""
    if a.numel() == 0 or src.numel() == 0:
        return torch.zeros(src.numel())
    keys = torch.cat([a * n + b, b * n + a])
    vals = torch.cat([values, values]).float()
    keys, order = torch.sort(keys)
    vals = vals[order]
    q = src * n + dst
    pos = torch.searchsorted(keys, q).clamp(max=keys.numel() - 1)
    return torch.where(keys[pos] == q, vals[pos], torch.zeros(q.numel()))


@dataclass(frozen=True)
class Phase1Inputs:
    """What the Phase-1 features of a graph's edges are read from besides its embeddings: each node's sequence
    (``group``, ``order``: :func:`sequence_positions`), its entities, the causal pairs and their confidences
    (``(a, b, confidence)``) and the decay ``tau`` of ``p_t``."""

    group: Sequence
    order: Sequence[int]
    entities: Sequence[set[str]]
    causal: tuple[Tensor, Tensor, Tensor]
    tau: float


def phase1_features(graph: MemoryGraph, src: Tensor, dst: Tensor, inputs: Phase1Inputs) -> Tensor:
    """``[E, 4]`` rows ``[p_t, p_s, p_c, p_e]`` (module docstring) for the edges ``src -> dst``."""
    emb, i = graph.embeddings, inputs
    return torch.stack(
        [
            temporal_proximity(i.group, i.order, src, dst, i.tau),
            (emb[src] * emb[dst]).sum(1).clamp(-1.0, 1.0),
            lookup_pairs(graph.num_nodes, *i.causal, src, dst),
            jaccard(i.entities, src, dst),
        ],
        dim=1,
    )


def undirected_unique(a: Tensor, b: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Drop self pairs and duplicates (in either orientation); returns pairs with ``a < b``."""
    keep = a != b
    lo, hi = torch.minimum(a[keep], b[keep]), torch.maximum(a[keep], b[keep])
    key = torch.unique(lo * n + hi)
    return key // n, key % n


def add_relation_edges(
    graph: MemoryGraph, pairs: dict[str, tuple[Tensor, Tensor]], features: str, inputs: Phase1Inputs
) -> None:
    """Insert both directions of every pair with ``scored`` (from ``inputs``) or ``onehot`` features, in one call.

    Edges are ordered by relation (in ``pairs`` order), then source, then target.
    """
    n = graph.num_nodes
    srcs, dsts, rels = [], [], []
    for relation, (a, b) in pairs.items():
        lo, hi = undirected_unique(a, b, n)
        src, dst = torch.cat([lo, hi]), torch.cat([hi, lo])
        order_key = torch.argsort(src * n + dst)
        srcs.append(src[order_key])
        dsts.append(dst[order_key])
        rels.append(torch.full((src.numel(),), graph.relations.index(relation), dtype=torch.long))
    src, dst, rel = torch.cat(srcs), torch.cat(dsts), torch.cat(rels)
    if src.numel() == 0:
        return
    feats = phase1_features(graph, src, dst, inputs) if features == "scored" else None
    graph.add_edges(src, dst, rel, features=feats)


def add_document_edges(
    graph: MemoryGraph,
    sentences: Sequence[str],
    group: Sequence,
    order: Sequence[int],
    entities: Sequence[set[str]],
    bridges: tuple[list[int], list[int]],
    cfg: GraphConfig,
) -> None:
    """Edges of a document graph (HotpotQA paragraphs, passage corpora), in one call: temporal between
    consecutive nodes of a paragraph (``group``, ``order``), semantic kNN, causal cues between
    consecutive ``sentences`` (``""`` for a node that is no sentence), and entity = the title
    ``bridges`` pairs plus nodes sharing an entity (:func:`entity_pairs`)."""
    causal = causal_pairs(
        sentences, [None] * len(sentences), group, order, cfg.causal_qa_confidence, cfg.causal_connective_confidence
    )
    ent_a, ent_b = entity_pairs(entities, cfg.entity_fanout, cfg.entity_max_share)
    pairs = {
        "temporal": sequence_pairs(group, order),
        "semantic": semantic_knn_pairs(graph.embeddings, cfg.semantic_k, cfg.semantic_threshold),
        "causal": causal[:2],
        "entity": (
            torch.cat([torch.as_tensor(bridges[0], dtype=torch.long), ent_a]),
            torch.cat([torch.as_tensor(bridges[1], dtype=torch.long), ent_b]),
        ),
    }
    add_relation_edges(graph, pairs, cfg.features, Phase1Inputs(group, order, entities, causal, cfg.temporal_tau))


def sequence_positions(graph: MemoryGraph) -> tuple[list, list[int]]:
    """``(group, order)`` of every node from its metadata, the sequence the temporal pairs and ``p_t``
    follow: LoCoMo turns ``(session, position)``; document sentences ``(paragraph, sent_idx)`` with a
    title or passage node at order ``-1``; ``(None, row)`` for a node with neither."""
    return sequence_positions_of(graph.metadata, range(graph.num_nodes))


def sequence_positions_of(metadata: Sequence[dict], rows: Sequence[int]) -> tuple[list, list[int]]:
    """:func:`sequence_positions` of the nodes with these ``metadata`` at these ``rows``."""
    group, order = [], []
    for row, m in zip(rows, metadata, strict=True):
        if "session" in m:
            group.append(m["session"])
            order.append(int(m.get("position", row)))
        elif "paragraph" in m:
            group.append(m["paragraph"])
            order.append(-1 if m.get("kind") in ("title", "passage") else int(m["sent_idx"]))
        else:
            group.append(None)
            order.append(row)
    return group, order


def replace_entity_edges(graph: MemoryGraph, entities: Sequence[set[str]], cfg: GraphConfig) -> MemoryGraph:
    """A copy of ``graph`` whose ``entity`` edges are rebuilt from per-node ``entities`` by the
    builders' rule (:func:`entity_pairs`: ``cfg.entity_fanout`` later mentions per mention, entities in
    more than ``max(10, cfg.entity_max_share * N)`` nodes skipped), both directions.

    With ``graph.info["features"] == "scored"`` the new edges carry Phase-1 features like the rest of
    the graph: ``p_t`` from :func:`sequence_positions`, ``p_s`` the cosine, ``p_c`` the causal
    confidence of the pair read from the graph's ``causal`` edges, ``p_e`` the Jaccard of ``entities``;
    otherwise the relation one-hot.
    """
    out = graph.copy()
    if "entity" not in out.relations:
        raise ValueError(f"graph {graph.name!r} has no 'entity' relation to rebuild")
    rel = out.relations.index("entity")
    old = (out.edge_type == rel).nonzero().flatten()
    if old.numel():
        out.remove_edges(old)
    lo, hi = undirected_unique(*entity_pairs(entities, cfg.entity_fanout, cfg.entity_max_share), out.num_nodes)
    src, dst = torch.cat([lo, hi]), torch.cat([hi, lo])
    if src.numel() == 0:
        return out
    feats = None
    if graph.info.get("features") == "scored":
        causal_rel = out.relations.index("causal") if "causal" in out.relations else -1
        is_causal = out.edge_type == causal_rel
        causal = (out.edge_index[0][is_causal], out.edge_index[1][is_causal], out.edge_attr_init[is_causal, 2])
        group, order = sequence_positions(out)
        feats = phase1_features(out, src, dst, Phase1Inputs(group, order, entities, causal, cfg.temporal_tau))
    out.add_edges(src, dst, "entity", features=feats)
    return out
