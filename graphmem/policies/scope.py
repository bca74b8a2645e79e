"""The queries of one batched call and the graphs they are asked over.

Every batched call, over one graph or over many, is a :class:`Scope`: a
:class:`~graphmem.core.graph_batch.GraphBatch` (a single graph is a batch of one, the graph itself) and
the queries, those of each component in one run. A policy's algorithm works in the union's node
rows and edge ids; since no edge crosses two components a walk never leaves its graph, and what
needs the query's own graph (entry selection, ranking nodes by cosine) reads :attr:`node_offset`
and :attr:`sizes` or :meth:`cosine`, which never scores a query against another graph's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.graph_batch import GraphBatch, graph_batch
from graphmem.core.retrieval import Query
from graphmem.policies.ranking import scoped_cosine


@dataclass
class Scope:
    """Queries over the components of a graph batch (see module docstring).

    Args:
        batch: the graphs, as one disjoint union.
        queries: all queries, those of component ``c`` the ``counts[c]`` consecutive ones of their run.
        counts: queries per component.
        device: where the policy's tensors live.
    """

    batch: GraphBatch
    queries: list[Query]
    counts: list[int]
    device: torch.device
    _cosine: Tensor | None = field(default=None, repr=False)

    @classmethod
    def single(cls, graph: MemoryGraph, queries: Sequence[Query], device: torch.device) -> Scope:
        """All ``queries`` over one ``graph``."""
        return cls(GraphBatch.single(graph), list(queries), [len(queries)], torch.device(device))

    @classmethod
    def union(cls, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], device: torch.device) -> Scope:
        """``queries[c]`` over ``graphs[c]``, as one call over the graphs' cached union."""
        flat = [q for qs in queries for q in qs]
        return cls(graph_batch(graphs), flat, [len(qs) for qs in queries], torch.device(device))

    @property
    def graph(self) -> MemoryGraph:
        """The graph the policy walks (the union; a single graph itself)."""
        return self.batch.graph

    @property
    def num_graphs(self) -> int:
        return self.batch.num_graphs

    @cached_property
    def comp(self) -> Tensor:
        """``[B]`` component of each query (non-decreasing), on :attr:`device`."""
        if self.num_graphs == 1:
            return torch.zeros(len(self.queries), dtype=torch.long, device=self.device)
        return self.batch.query_components(self.counts, self.device)

    @cached_property
    def node_offset(self) -> Tensor:
        """``[B]`` first union row of each query's graph."""
        return self._per_query(lambda b: b.node_ptr[:-1], 0)

    @cached_property
    def edge_offset(self) -> Tensor:
        """``[B]`` first union edge id of each query's graph."""
        return self._per_query(lambda b: b.edge_ptr[:-1], 0)

    @cached_property
    def sizes(self) -> Tensor:
        """``[B]`` nodes of each query's graph."""
        return self._per_query(lambda b: b.sizes, self.graph.num_nodes)

    def _per_query(self, per_graph, single: int) -> Tensor:
        """``per_graph(batch)[comp]`` on the device (one graph: ``single`` for every query)."""
        if self.num_graphs == 1:
            return torch.full((len(self.queries),), single, dtype=torch.long, device=self.device)
        return per_graph(self.batch).to(self.device)[self.comp]

    def cosine(self, compute: bool = True) -> Tensor | None:
        """``[B, W]`` cosine of each query to its own graph's nodes (:func:`~graphmem.policies.ranking.scoped_cosine`:
        column ``j`` of row ``b`` is node ``node_offset[b] + j``, ``-inf`` past its graph), computed once.

        With ``compute=False`` the matrix is returned only if something (the embedding entry
        selector) has computed it already, else ``None``.
        """
        if self._cosine is None and compute:
            self._cosine = scoped_cosine(self.batch, self.queries, self.counts, self.device)
        return self._cosine
