"""graphmem: learning how to traverse agent memory graphs.

``from graphmem import Memory`` is the live memory (:mod:`graphmem.memory`), loaded on first use so that
importing a contract (``graphmem.core``) does not load the policies, builders and store behind it.
"""

from graphmem.core.graph import RELATIONS, GraphError, MemoryGraph

__all__ = ["RELATIONS", "GraphError", "Memory", "MemoryGraph", "MemoryRetrieval"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("Memory", "MemoryRetrieval"):
        from graphmem import memory  # lazily: the front door stands on every floor below it

        return getattr(memory, name)
    raise AttributeError(f"module 'graphmem' has no attribute {name!r}")
