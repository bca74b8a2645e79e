"""Entry selection: which nodes a traversal starts from (GraphMemory Algorithm 1, line 1).

An :class:`EntrySelector` maps a batch of queries to at most ``budget.max_entries`` valid node
rows per query. The embedding selector ranks nodes by cosine similarity; another selector (for
example GraphMemory's LLM retriever over the compact index) registers itself with
:func:`register_entry_selector` and must obey the same contract: only valid rows, no
duplicates, and an empty list means "no memory" (no fallback to the full graph).

:func:`entry_rows` is what the policy base class calls: the entries of every query of a
:class:`~graphmem.policies.scope.Scope` as one tensor, each from the query's own graph.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, Union, runtime_checkable

import numpy as np
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.registry import Registry
from graphmem.core.retrieval import Budget, Query
from graphmem.policies.batched import pad_rows
from graphmem.policies.ranking import cosine_matrix, scoped_topk, topk_by_score
from graphmem.policies.scope import Scope
from graphmem.policies.tables import node_id_rank


@runtime_checkable
class EntrySelector(Protocol):
    """Chooses entry rows for a batch of queries.

    ``select`` returns one list per query of at most ``budget.max_entries`` distinct valid rows,
    best first. An empty list means the retrieval is empty; callers never fall back.
    """

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]: ...


ENTRY_SELECTORS = Registry("entry selector", lazy={"llm": "graphmem.llm.retriever", "ann": "graphmem.policies.ann"})
register_entry_selector = ENTRY_SELECTORS.register


SelectorSpec = Union[str, Mapping[str, Any], EntrySelector]
"""What a policy's ``entry_selector`` accepts: a registered name, a mapping ``{name: ..., <kwargs>}``
or a selector instance (:func:`make_entry_selector`)."""


def make_entry_selector(name: SelectorSpec = "embedding", **kwargs) -> EntrySelector:
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


def entry_rows(selector: EntrySelector, scope: Scope, budget: Budget) -> Tensor:
    """``[B, <=max_entries]`` entry rows of the scope's union (``-1`` padded), on the scope's device.

    The entries of query ``b`` come from its own graph only. The embedding selector's tie-aware
    top-k runs on the scope's cosine matrix (:meth:`Scope.cosine`, kept for the policy to reuse);
    its rows are valid and distinct by construction. Any other selector is asked once per graph,
    over that graph, and its lists go through :func:`validate_entries`.
    """
    if type(selector) is EmbeddingEntrySelector:
        return scoped_topk(scope.cosine(), budget.max_entries, scope.batch, scope.node_offset, scope.sizes)
    rows: list[list[int]] = []
    start = 0
    for graph, off, c in zip(scope.batch.graphs, scope.batch.node_ptr.tolist(), scope.counts):
        picked = selector.select(graph, scope.queries[start : start + c], budget) if c else []
        rows += [[v + off for v in validate_entries(graph, p, budget)] for p in picked]
        start += c
    return pad_rows(rows, budget.max_entries, device=scope.device)


def entry_tensor(graph: MemoryGraph, entries: Tensor | Sequence[Sequence[int]], budget: Budget, device) -> Tensor:
    """Given entry rows as a ``[B, K]`` tensor of valid, distinct rows (``-1`` padded), or as lists
    (validated with :func:`validate_entries`), as a tensor on ``device``."""
    if isinstance(entries, Tensor):
        return entries.to(device)
    return pad_rows([validate_entries(graph, e, budget) for e in entries], budget.max_entries, device=device)
