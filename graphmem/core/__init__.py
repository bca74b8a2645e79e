"""The contracts every layer uses: the memory graph, what a policy sees (:class:`Query`, :class:`Budget`)
and returns (:class:`Retrieval`), graph batches, errors and registries. Nothing here imports anything
else of the project."""

from graphmem.core.budget import Budget
from graphmem.core.graph import RELATIONS, GraphError, MemoryGraph
from graphmem.core.retrieval import Query, Retrieval, RetrievalBatch

__all__ = ["RELATIONS", "Budget", "GraphError", "MemoryGraph", "Query", "Retrieval", "RetrievalBatch"]
