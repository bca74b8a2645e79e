"""Flat lexical retrieval: nodes ranked by Okapi BM25 of their text to the query, loaded under the budget.

Each node ``v`` of the query's own graph scores ``BM25(q, v)`` (:mod:`graphmem.lexical`: Lucene
IDF, ``k1``, ``b``; the graph's index from ``graph.indexes``, saved with the set). Nodes are ranked
by (score desc, string id asc), the nodes that share no term with the query last (score 0, by id),
and loaded in that order with :func:`~graphmem.policies.batched.load_under_budget`, which skips a
node whose tokens would exceed ``max_tokens`` and stops at ``max_nodes``. No edge is read;
``entries`` are the first ``max_entries`` loaded nodes.

``entry_selector=bm25`` gives a walk the ``max_entries`` best BM25 nodes (those that share a term
with the query only; none shared: no entries).
"""

from __future__ import annotations

import itertools
from typing import Iterator, Sequence

import numpy as np
import torch

from graphmem.graph import MemoryGraph
from graphmem.lexical import bm25_for
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import load_rankings
from graphmem.policies.selectors import register_entry_selector
from graphmem.policies.tables import node_id_rank
from graphmem.policies.types import Query


def bm25_ranking(graph: MemoryGraph, query: str, k1: float = 1.5, b: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, scores)`` of the nodes of ``graph`` that share a term with ``query``, by (BM25 desc, string id asc)."""
    rows, scores = bm25_for(graph, k1, b).rank(query)
    order = np.lexsort((node_id_rank(graph).numpy()[rows], -scores))
    return rows[order], scores[order]


def id_order(graph: MemoryGraph) -> list[int]:
    """Every row of ``graph`` by ascending string id (cached)."""
    return graph.cached("policies.id_order", lambda: torch.argsort(node_id_rank(graph)).tolist())


def _then_the_rest(graph: MemoryGraph, rows: list[int]) -> Iterator[int]:
    """``rows``, then every other row of ``graph`` by string id (produced only as far as it is read)."""
    taken = set(rows)
    return itertools.chain(rows, (v for v in id_order(graph) if v not in taken))


@register_policy("bm25")
class BM25Policy(TraversalPolicy):
    """BM25 top-nodes under the shared budget (see module docstring).

    Args:
        k1: term-frequency saturation (default: 1.5).
        b: length normalisation (default: 0.75).
        device: where the result tensors live (default: ``"cpu"``; the ranking runs on the CPU).
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, device: str | torch.device = "cpu") -> None:
        self.device = resolve_device(device)
        self.k1, self.b = k1, b

    def traverse(self, scope: Scope, entries: None, budget: Budget) -> RetrievalBatch:
        """Each query's BM25 ranking over its own graph, loaded under the budget."""
        rankings = []
        for b, q in enumerate(scope.queries):
            own = scope.batch.graphs[int(scope.comp[b])]
            rows, scores = bm25_ranking(own, q.text, self.k1, self.b)
            rows = rows.tolist()
            rankings.append((_then_the_rest(own, rows), dict(zip(rows, scores.tolist()))))
        return load_rankings(scope, rankings, budget)


@register_entry_selector("bm25")
class BM25EntrySelector:
    """Top-``budget.max_entries`` nodes by BM25 (ties by ascending string id); nodes sharing no term are never entries.

    Args:
        k1: term-frequency saturation (default: 1.5).
        b: length normalisation (default: 0.75).
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        if graph.num_nodes == 0:
            return [[] for _ in queries]
        return [bm25_ranking(graph, q.text, self.k1, self.b)[0][: budget.max_entries].tolist() for q in queries]
