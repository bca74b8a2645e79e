"""Flat lexical retrieval: nodes ranked by Okapi BM25 of their text to the query, loaded under the budget.

Each node ``v`` of the query's own graph scores ``BM25(q, v)`` (:mod:`graphmem.index.lexical`: Lucene
IDF, ``k1``, ``b``; the graph's index from ``graph.indexes``, saved with the set). Nodes are ranked
by (score desc, string id asc), the nodes that share no term with the query last (score 0, by id),
and loaded in that order with :func:`~graphmem.policies.batched.load_under_budget`, which skips a
node whose tokens would exceed ``max_tokens`` and stops at ``max_nodes``. No edge is read;
``entries`` are the first ``max_entries`` loaded nodes.

``entry_selector=bm25`` gives a walk the ``max_entries`` best BM25 nodes (those that share a term
with the query only; none shared: no entries).

Bounded per query: on graphs of at least ``min_nodes`` nodes (default :data:`BOUNDED_MIN_NODES`) the
ranking is read as far as it is used, from :meth:`~graphmem.index.lexical.BM25Index.rank_bounded` (the exact
top-``k`` by the threshold algorithm over impact-ordered postings, ties by string id): the policy asks for
the top ``max_nodes + 1`` (the loader reads one past its last node), then twice as many each time its
loader reads past them, and the rows that share no term follow by id as before. The same rows in the
same order as the full ranking, without its pass over every posting of the query's terms; smaller graphs
rank in full.
"""

from __future__ import annotations

import itertools
from typing import Iterator, Sequence

import numpy as np
import torch

from graphmem.core.graph import MemoryGraph
from graphmem.core.retrieval import Query
from graphmem.index.lexical import bm25_for
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import load_rankings
from graphmem.policies.selectors import register_entry_selector
from graphmem.policies.tables import kept, node_id_rank


def bm25_ranking(graph: MemoryGraph, query: str, k1: float = 1.5, b: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, scores)`` of the nodes of ``graph`` that share a term with ``query``, by (BM25 desc, string id asc)."""
    rows, scores = bm25_for(graph, k1, b).rank(query)
    order = np.lexsort((node_id_rank(graph).numpy()[rows], -scores))
    return rows[order], scores[order]


BOUNDED_MIN_NODES = 16384
"""Graphs of at least this many nodes rank by the bounded top-k (:func:`bm25_top`); smaller ones in full."""


def bm25_top(graph: MemoryGraph, query: str, k: int, k1: float = 1.5, b: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` of :func:`bm25_ranking` (same rows, scores and tie order), from the heads of the
    postings only (:meth:`~graphmem.index.lexical.BM25Index.rank_bounded`, tie rank: the string id's)."""
    return bm25_for(graph, k1, b).rank_bounded(query, k, node_id_rank(graph).numpy())


def bm25_rows(graph: MemoryGraph, query: str, k: int, min_nodes: int, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """The first ``k`` rows of :func:`bm25_ranking`: bounded (:func:`bm25_top`) on graphs of at least
    ``min_nodes`` nodes, else cut from the full ranking."""
    if graph.num_nodes >= max(min_nodes, 1):
        return bm25_top(graph, query, k, k1, b)[0]
    return bm25_ranking(graph, query, k1, b)[0][:k]


def _bounded_ranking(graph: MemoryGraph, query: str, first: int, k1: float, b: float, scores: dict) -> Iterator[int]:
    """:func:`bm25_ranking`'s rows then the rest by id (as :func:`_then_the_rest`), produced from bounded
    top-``k`` reads (``k = first, 2 first, ...``) as far as the loader reads; ``scores`` fills in as it goes."""
    k, done = first, 0
    while True:
        rows, score = bm25_top(graph, query, k, k1, b)
        scores.update(zip(rows[done:].tolist(), score[done:].tolist()))
        yield from rows[done:].tolist()
        if rows.size < k:
            break
        done, k = rows.size, 2 * k
    taken = set(rows.tolist())  # every row that shares a term: the rest follow by id
    yield from (v for v in id_order(graph) if v not in taken)


def id_order(graph: MemoryGraph) -> list[int]:
    """Every row of ``graph`` by ascending string id (cached)."""
    return kept(graph, "policies.id_order", lambda: torch.argsort(node_id_rank(graph)).tolist())


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
        min_nodes: graphs of at least this many nodes rank by bounded top-k reads (module docstring;
            the same order), smaller ones in full; 0: always bounded (default: 16384).
    """

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        device: str | torch.device = "cpu",
        min_nodes: int = BOUNDED_MIN_NODES,
    ) -> None:
        self.device = resolve_device(device)
        self.k1, self.b, self.min_nodes = k1, b, _check_min_nodes(min_nodes, "bm25")

    def traverse(self, scope: Scope, entries: None, budget: Budget) -> RetrievalBatch:
        """Each query's BM25 ranking over its own graph, loaded under the budget."""
        rankings = []
        for b, q in enumerate(scope.queries):
            own = scope.batch.graphs[int(scope.comp[b])]
            if own.num_nodes >= max(self.min_nodes, 1):
                scores: dict[int, float] = {}
                first = max(budget.max_nodes, 1) + 1  # the loader reads one past its last node
                rankings.append((_bounded_ranking(own, q.text, first, self.k1, self.b, scores), scores))
                continue
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
        min_nodes: graphs of at least this many nodes take the bounded top-k (:func:`bm25_top`, the same
            entries), smaller ones cut the full ranking (default: 16384).
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, min_nodes: int = BOUNDED_MIN_NODES) -> None:
        self.k1, self.b, self.min_nodes = k1, b, _check_min_nodes(min_nodes, "bm25")

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        if graph.num_nodes == 0:
            return [[] for _ in queries]
        k = budget.max_entries
        return [bm25_rows(graph, q.text, k, self.min_nodes, self.k1, self.b).tolist() for q in queries]


def _check_min_nodes(value: int, owner: str) -> int:
    """``value`` when it is a non-negative integer, else a ``ValueError`` naming ``owner``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{owner}: min_nodes must be a non-negative integer, got {value!r}")
    return value
