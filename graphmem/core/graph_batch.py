"""Many memory graphs as one: the disjoint union a batched policy walks in a single call.

A dataset such as HotpotQA has one small graph per question; walking them one call at a time is a
per-query loop. :func:`graph_batch` stacks graphs ``G_0 .. G_{C-1}`` into one
:class:`~graphmem.core.graph.MemoryGraph` (node rows of ``G_c`` are ``node_ptr[c] .. node_ptr[c+1]-1``,
edge ids ``edge_ptr[c] .. edge_ptr[c+1]-1``, both in their original order), so a walk never leaves
its component. What a policy must add is the query's *scope*: entry selection and any ranking
of nodes look at the query's own component only (see :class:`graphmem.policies.scope.Scope`).

The union keeps, per component, the order of node ids (ids are prefixed with the component
index), the CSR order of out-edges and the node token counts, so a retrieval over the union,
shifted back by the offsets, equals the retrieval over the component graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import NODE_TOKENS, node_tokens


@dataclass
class GraphBatch:
    """A disjoint union of graphs.

    Args:
        graph: the union graph.
        graphs: the component graphs, in order.
        node_ptr: ``[C + 1]`` long, component ``c`` owns node rows ``node_ptr[c]:node_ptr[c+1]``.
        edge_ptr: ``[C + 1]`` long, component ``c`` owns edge ids ``edge_ptr[c]:edge_ptr[c+1]``.
        names: the component names (:attr:`MemoryGraph.name`, or the mapping's keys).
    """

    graph: MemoryGraph
    graphs: list[MemoryGraph]
    node_ptr: Tensor
    edge_ptr: Tensor
    names: list[str]

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    @property
    def sizes(self) -> Tensor:
        """``[C]`` nodes per component."""
        return self.node_ptr[1:] - self.node_ptr[:-1]

    @property
    def node_component(self) -> Tensor:
        """``[N]`` component index of every node row of the union."""
        return torch.repeat_interleave(torch.arange(self.num_graphs, device=self.sizes.device), self.sizes)

    def offset_of(self, name: str) -> int:
        """First union node row of the component called ``name``."""
        return int(self.node_ptr[self.names.index(name)])

    @classmethod
    def single(cls, graph: MemoryGraph) -> GraphBatch:
        """One graph as a batch of one: the union is the graph itself (nothing is copied). Its pointers are kept in
        ``graph.derived``, the batch is not: a batch kept by its own graph would be a cycle, and a graph let go of
        would wait for the cyclic collector to be freed."""
        held = graph.derived.get("core.graph_batch.single")
        if held is None:
            ptr = lambda n: torch.tensor([0, n], device=torch.device("cpu"))  # noqa: E731
            held = graph.derived.put("core.graph_batch.single", (ptr(graph.num_nodes), ptr(graph.num_edges)))
        return cls(graph, [graph], *held, [graph.name or "0"])

    @classmethod
    def from_graphs(cls, graphs: Sequence[MemoryGraph] | Mapping[str, MemoryGraph]) -> GraphBatch:
        """Stack ``graphs`` (same embedding dimension and relation names) into one union graph; a
        mapping names its components by its keys."""
        if isinstance(graphs, Mapping):
            names, graphs = list(graphs), list(graphs.values())
        else:
            graphs = list(graphs)
            names = [g.name or str(i) for i, g in enumerate(graphs)]
        if not graphs:
            raise ValueError("graph_batch needs at least one graph")
        first = graphs[0]
        for i, g in enumerate(graphs):
            if g.dim != first.dim:
                raise ValueError(f"graph_batch: graph {i} has {g.dim}-dimensional embeddings, graph 0 has {first.dim}")
            if tuple(g.relations) != tuple(first.relations):
                raise ValueError(f"graph_batch: graph {i} has relations {g.relations}, graph 0 has {first.relations}")
        cpu = torch.device("cpu")  # explicit, so a default-device context cannot move the index tensors
        node_ptr = torch.tensor([0] + [g.num_nodes for g in graphs], device=cpu).cumsum(0)
        edge_ptr = torch.tensor([0] + [g.num_edges for g in graphs], device=cpu).cumsum(0)
        offsets = torch.repeat_interleave(node_ptr[:-1], edge_ptr[1:] - edge_ptr[:-1])
        width = len(str(len(graphs) - 1))
        union = MemoryGraph(
            node_ids=[f"{c:0{width}d}/{nid}" for c, g in enumerate(graphs) for nid in g.node_ids],
            texts=[t for g in graphs for t in g.texts],
            keys=[k for g in graphs for k in g.keys],
            embeddings=torch.cat([g.embeddings for g in graphs]),
            timestamps=torch.cat([g.timestamps for g in graphs]),
            metadata=[m for g in graphs for m in g.metadata],
            edge_index=torch.cat([g.edge_index for g in graphs], 1) + offsets,
            edge_type=torch.cat([g.edge_type for g in graphs]),
            S=torch.cat([g.S for g in graphs]),
            F=torch.cat([g.F for g in graphs]),
            edge_attr=torch.cat([g.edge_attr for g in graphs]),
            edge_attr_init=torch.cat([g.edge_attr_init for g in graphs]),
            relations=tuple(first.relations),
            info={"graph_batch": len(graphs)},
        )
        # token counts are those of the component graphs (the prefixed ids must not change them)
        union.derived.put(NODE_TOKENS, torch.cat([node_tokens(g) for g in graphs]))
        return cls(union, graphs, node_ptr, edge_ptr, names)

    def query_components(self, counts: Sequence[int], device: str | torch.device = "cpu") -> Tensor:
        """``[sum(counts)]`` component of each query when component ``c`` has ``counts[c]`` queries, in order."""
        return torch.repeat_interleave(
            torch.arange(self.num_graphs, device=device), torch.as_tensor(list(counts), device=device)
        )


def graph_batch(graphs: Sequence[MemoryGraph]) -> GraphBatch:
    """:meth:`GraphBatch.from_graphs`, kept in the first graph's ``derived`` tables until any component changes.

    A component counts as changed when its :attr:`~MemoryGraph.version` went up (every structural or
    counter mutation through :class:`MemoryGraph`) or when one of its tensors was replaced or edited in
    place (the version counters :class:`~graphmem.core.derived.DerivedTables` tracks).
    """
    graphs = list(graphs)
    deps = [t for g in graphs for t in (g, g.embeddings, g.edge_index, g.edge_type, g.S, g.F, g.edge_attr)]
    batch = graphs[0].derived.get("core.graph_batch", deps)
    if batch is None:
        batch = graphs[0].derived.put("core.graph_batch", GraphBatch.from_graphs(graphs), deps)
    return batch
