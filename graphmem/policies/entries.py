"""Entry selection: which nodes a traversal starts from (GraphMemory Algorithm 1, line 1).

An :class:`EntrySelector` maps a batch of queries to at most ``budget.max_entries`` valid node
rows per query. The embedding selector ranks nodes by cosine similarity; another selector (for
example GraphMemory's LLM retriever over the compact index) registers itself with
:func:`register_entry_selector` and must obey the same contract: only valid rows, no
duplicates, and an empty list means "no memory" (no fallback to the full graph).

The module also holds the small per-graph caches every heuristic policy shares: unit node
embeddings, the rank of each node's string id (the deterministic tie-break), and
:func:`graph_cached`, which keys a cached value on the identity and in-place version counter of
the graph tensors it was built from (``MemoryGraph.observe`` updates ``S``/``F`` in place).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.graph_batch import GraphBatch
from graphmem.policies.base import Budget, Query
from graphmem.registry import Registry


# ---------------------------------------------------------------------------- per-graph caches
def graph_cached(
    graph: MemoryGraph,
    name: str,
    deps: Sequence[Tensor],
    build: Callable[[], Any],
    device: str | torch.device | None = None,
) -> Any:
    """Return ``build()`` cached on ``graph`` until a tensor in ``deps`` is replaced or changed in place.

    Structural mutations clear the graph's cache anyway; ``deps`` catches the in-place counter
    updates of :meth:`MemoryGraph.observe` (tracked by each tensor's version counter). With a
    non-CPU ``device``, a copy of the value (a tensor or a tuple of tensors) moved there is cached
    as well, so query batches find the graph's tables on their device.
    """
    value = graph.cached(name, build, deps)
    if device is None or torch.device(device).type == "cpu":
        return value
    return graph.cached(f"{name}@{device}", lambda: to_device(value, device), deps)


def to_device(value: Any, device: str | torch.device) -> Any:
    """A tensor, or a tuple of tensors (other items unchanged), moved to ``device``."""
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value).to(device)
    if isinstance(value, tuple):
        moved = [to_device(v, device) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else tuple(moved)  # named tuples keep their type
    return value


def graph_tables(graph: MemoryGraph, device: str | torch.device | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """``(node tokens [N], (rowptr [N+1], perm [E]))`` of :meth:`MemoryGraph.node_tokens` and
    :meth:`MemoryGraph.csr`, on ``device`` (cached there)."""
    tokens = graph_cached(graph, "policies.node_tokens", (), graph.node_tokens, device)
    return tokens, graph_cached(graph, "policies.csr", (graph.edge_index,), graph.csr, device)


def node_id_rank(graph: MemoryGraph, device: str | torch.device | None = None) -> Tensor:
    """``[N]`` long: position of each node's string id in ascending string order."""

    def build() -> Tensor:
        order = sorted(range(graph.num_nodes), key=graph.node_ids.__getitem__)
        rank = torch.empty(graph.num_nodes, dtype=torch.long)
        rank[torch.tensor(order, dtype=torch.long)] = torch.arange(graph.num_nodes)
        return rank

    return graph_cached(graph, "policies.id_rank", (), build, device)


def unit_embeddings(graph: MemoryGraph, device: str | torch.device | None = None) -> Tensor:
    """``[N, D]`` L2-normalised node embeddings (cached while the embedding tensor is unchanged)."""
    return graph_cached(
        graph,
        "policies.unit_embeddings",
        (graph.embeddings,),
        lambda: torch.nn.functional.normalize(graph.embeddings.float(), dim=1),
        device,
    )


def query_matrix(graph: MemoryGraph, queries: Sequence[Query]) -> Tensor:
    """``[B, D]`` L2-normalised query embeddings; raises if a dimension differs from the graph's."""
    rows, dim = [], graph.dim
    for q in queries:
        e = q.embedding.float().flatten()
        if e.numel() != dim:
            raise ValueError(f"query {q.qid!r}: embedding has {e.numel()} values, graph embeddings have {dim}")
        rows.append(e)
    if not rows:
        return torch.empty(0, graph.dim)
    return torch.nn.functional.normalize(torch.stack(rows), dim=1)


def cosine_matrix(graph: MemoryGraph, queries: Sequence[Query], device: str | torch.device | None = None) -> Tensor:
    """``[B, N]`` cosine similarity of every query to every node, one matmul (on ``device``; default CPU)."""
    x = unit_embeddings(graph, device)
    return query_matrix(graph, queries).to(x.device) @ x.T


def topk_by_score(scores: Tensor, k: int, id_rank: Tensor, col_offset: Tensor | None = None) -> Tensor:
    """``[B, min(k, N)]`` columns of the ``k`` highest scores per row, ties by ascending ``id_rank``.

    ``torch.topk`` does not order ties; this finds the ``k``-th value per row, keeps every column
    at or above it, and sorts those lexicographically by (row, -score, id rank). A score of
    ``-inf`` marks a column as absent (the padding of :func:`scoped_cosine`): such columns come
    last, in no particular order.

    Args:
        scores: ``[B, N]`` scores.
        k: columns to keep per row.
        id_rank: tie-break rank (lower first): column ``j`` of row ``b`` has rank
            ``id_rank[j + col_offset[b]]`` (``col_offset`` default: zeros).
    """
    b, n = scores.shape
    k = min(k, n)
    if k == 0 or b == 0:
        return torch.empty(b, k, dtype=torch.long, device=scores.device)
    # rows whose top k+1 values are strictly decreasing have a unique answer: plain topk order
    vals, cols = scores.topk(min(k + 1, n), dim=1)
    tied = ((vals[:, 1:] == vals[:, :-1]) & (vals[:, 1:] > float("-inf"))).any(1)
    if not bool(tied.any()):
        return cols[:, :k]
    out = cols[:, :k].clone()
    rows = tied.nonzero().flatten()
    out[rows] = _topk_with_ties(scores[rows], k, id_rank, None if col_offset is None else col_offset[rows])
    return out


def _topk_with_ties(scores: Tensor, k: int, id_rank: Tensor, col_offset: Tensor | None) -> Tensor:
    """:func:`topk_by_score` for rows that have ties among their top ``k + 1`` scores."""
    b = scores.shape[0]
    kth = scores.topk(k, dim=1).values[:, -1:]
    rows, cols = (scores >= kth).nonzero(as_tuple=True)
    vals = scores[rows, cols]
    if col_offset is not None:  # padding columns past the last node may be among the ties; their rank is irrelevant
        cols_rank = id_rank[(cols + col_offset[rows]).clamp(max=id_rank.numel() - 1)]
    else:
        cols_rank = id_rank[cols]
    order = torch.argsort(cols_rank, stable=True)
    order = order[torch.argsort(-vals[order], stable=True)]
    order = order[torch.argsort(rows[order], stable=True)]
    rows, cols = rows[order], cols[order]
    counts = torch.bincount(rows, minlength=b)
    starts = torch.cumsum(counts, 0) - counts
    keep = (torch.arange(rows.numel(), device=rows.device) - starts[rows]) < k
    return cols[keep].view(b, k)


# ---------------------------------------------------------------------------- graph batches
def scoped_cosine(
    batch: GraphBatch, queries: Sequence[Query], comp: Tensor, device: str | torch.device | None = None
) -> Tensor:
    """``[B, W]`` cosine of query ``b`` to the nodes of its own component ``comp[b]`` of ``batch``.

    ``comp`` is non-decreasing (each component's queries are one run of rows). Column ``j`` of row
    ``b`` is union node ``node_ptr[comp[b]] + j``; ``W`` is the largest component and columns past a
    component's size hold ``-inf``. No query is scored against another component's nodes: the
    queries of each component are multiplied with that component's rows of the unit embeddings,
    the same matmul :func:`cosine_matrix` does on the component graph alone, so the scores are
    identical to it.
    """
    comp = comp.cpu()
    if bool((comp[1:] < comp[:-1]).any()):
        raise ValueError("scoped_cosine: the queries of each component must be one run (comp non-decreasing)")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    x = unit_embeddings(batch.graph, dev)
    q = query_matrix(batch.graph, queries).to(dev)
    scores = torch.full((len(queries), int(batch.sizes.max()) if batch.num_graphs else 0), float("-inf"), device=dev)
    groups, counts = torch.unique_consecutive(comp, return_counts=True)
    ptr, start = batch.node_ptr.tolist(), 0
    for g, c in zip(groups.tolist(), counts.tolist()):
        scores[start : start + c, : ptr[g + 1] - ptr[g]] = q[start : start + c] @ x[ptr[g] : ptr[g + 1]].T
        start += c
    return scores


def scoped_topk(scores: Tensor, k: int, batch: GraphBatch, comp: Tensor) -> Tensor:
    """:func:`topk_by_score` over :func:`scoped_cosine`'s ``[B, W]`` scores, as union node rows.

    Ties go by ascending string id within the component; rows of a component with fewer than ``k``
    nodes are ``-1`` padded after the real ones.
    """
    dev = scores.device
    comp = comp.to(dev)
    offset, size = batch.node_ptr.to(dev)[comp], batch.sizes.to(dev)[comp]
    top = topk_by_score(scores, k, node_id_rank(batch.graph, dev), offset)
    return torch.where(top < size[:, None], top + offset[:, None], -1)


# ---------------------------------------------------------------------------- selectors
@runtime_checkable
class EntrySelector(Protocol):
    """Chooses entry rows for a batch of queries.

    ``select`` returns one list per query of at most ``budget.max_entries`` distinct valid rows,
    best first. An empty list means the retrieval is empty; callers never fall back.
    """

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]: ...


ENTRY_SELECTORS = Registry("entry selector", lazy={"llm": "graphmem.llm.retriever", "ann": "graphmem.policies.ann"})
register_entry_selector = ENTRY_SELECTORS.register


def make_entry_selector(name: str | Mapping[str, Any] | EntrySelector = "embedding", **kwargs) -> EntrySelector:
    """Instantiate a registered selector by name, or from a mapping ``{name: ..., <its kwargs>}``
    (e.g. ``{name: ann, min_nodes: 0, index: {kind: hnsw}}``); an instance is returned unchanged."""
    if isinstance(name, Mapping):
        spec = dict(name)
        if "name" not in spec:
            raise ValueError(f"entry selector config {spec} has no 'name'; registered: {sorted(ENTRY_SELECTORS)}")
        return ENTRY_SELECTORS.make(spec.pop("name"), **spec, **kwargs)
    return ENTRY_SELECTORS.make(name, **kwargs) if isinstance(name, str) else name


@register_entry_selector("embedding")
class EmbeddingEntrySelector:
    """Top-``budget.max_entries`` nodes by cosine ``cos(q, x_v)``, ties by ascending node id.

    All queries are scored with one ``[B, D] x [D, N]`` matmul.
    """

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        if graph.num_nodes == 0:
            return [[] for _ in queries]
        scores = cosine_matrix(graph, queries)
        return topk_by_score(scores, budget.max_entries, node_id_rank(graph)).tolist()


def validate_entries(graph: MemoryGraph, entries: Sequence[int], budget: Budget) -> list[int]:
    """Keep valid, first-seen rows, at most ``budget.max_entries`` (invalid ids are discarded, B.2)."""
    out: list[int] = []
    for v in entries:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            continue
        if 0 <= int(v) < graph.num_nodes and int(v) not in out:
            out.append(int(v))
        if len(out) == budget.max_entries:
            break
    return out
