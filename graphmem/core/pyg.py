"""A memory graph as a ``torch_geometric.data.Data`` and back."""

from __future__ import annotations

from graphmem.core.graph import MemoryGraph

# Data attribute -> MemoryGraph field, for the tensors (kept as they are) and the text fields (copied as lists)
TENSORS = {
    "x": "embeddings",
    "edge_index": "edge_index",
    "edge_type": "edge_type",
    "edge_attr": "edge_attr",
    "edge_attr_init": "edge_attr_init",
    "S": "S",
    "F": "F",
    "timestamps": "timestamps",
}
LISTS = {"node_ids": "node_ids", "texts": "texts", "node_keys": "keys"}


def to_pyg(graph: MemoryGraph):
    """A ``torch_geometric.data.Data`` holding every field of ``graph`` (text fields as Python lists)."""
    from torch_geometric.data import Data  # lazily: torch_geometric takes seconds to import

    fields = {
        **{a: getattr(graph, f) for a, f in TENSORS.items()},
        **{a: list(getattr(graph, f)) for a, f in LISTS.items()},
    }
    node_metadata = [dict(m) for m in graph.metadata]
    return Data(
        **fields,
        node_metadata=node_metadata,
        relations=list(graph.relations),
        info=dict(graph.info),
        num_nodes=graph.num_nodes,
    )


def from_pyg(data) -> MemoryGraph:
    """Inverse of :func:`to_pyg` (validated)."""
    fields = {
        **{f: getattr(data, a) for a, f in TENSORS.items()},
        **{f: list(getattr(data, a)) for a, f in LISTS.items()},
    }
    metadata = [dict(m) for m in data.node_metadata]
    return MemoryGraph(**fields, metadata=metadata, relations=tuple(data.relations), info=dict(data.info)).validate()
