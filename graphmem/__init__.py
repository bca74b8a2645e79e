"""graphmem: learning how to traverse agent memory graphs."""

from graphmem.core.graph import RELATIONS, GraphError, MemoryGraph

__all__ = ["RELATIONS", "GraphError", "MemoryGraph"]
__version__ = "0.1.0"
