"""Tables derived from a graph, kept beside it by the layer that builds them.

A policy's neighbour table, a model's pair table or the lexical features' term table depend on the graph
only, so a batch of queries (or many batches) reads them without rebuilding. The graph never builds one:
the owning layer asks :meth:`DerivedTables.get`, builds the table itself on a miss and keeps it with
:meth:`DerivedTables.put`::

    table = graph.derived.get("models.pair_table", deps)
    if table is None:
        table = graph.derived.put("models.pair_table", build_pair_table(graph), deps)

An entry holds while the graph is unchanged: every mutation through
:class:`~graphmem.core.graph.MemoryGraph` clears the tables and raises :attr:`DerivedTables.version`, and
each entry is keyed by the version counters of its ``deps`` tensors (and the :attr:`version` of any graph
among them), so code that writes ``S``/``F`` in place, or replaces a tensor, cannot read a stale table.
"""

from __future__ import annotations

from typing import Any, Sequence

from torch import Tensor


def _stamp(deps: Sequence[Any]) -> tuple:
    """The version of every dependency: a tensor's version counter, a graph's :attr:`DerivedTables.version`."""
    out = []
    for dep in deps:
        derived = getattr(dep, "derived", None)
        out.append(dep._version if isinstance(dep, Tensor) else derived.version if derived is not None else None)
    return tuple(out)


class DerivedTables:
    """The derived tables of one graph, by key (module docstring)."""

    def __init__(self) -> None:
        self.version = 0
        self._tables: dict[str, tuple[tuple, tuple, Any]] = {}

    def get(self, key: str, deps: Sequence[Any] = ()) -> Any | None:
        """The table kept under ``key`` when ``deps`` are the same objects at the same versions, else ``None``."""
        hit = self._tables.get(key)
        if hit is None:
            return None
        stamp, held, value = hit
        if stamp != _stamp(deps) or len(held) != len(deps) or any(a is not b for a, b in zip(held, deps)):
            return None
        return value

    def put(self, key: str, value: Any, deps: Sequence[Any] = ()) -> Any:
        """Keep ``value`` under ``key`` while ``deps`` stay unchanged; returns ``value``."""
        self._tables[key] = (_stamp(deps), tuple(deps), value)
        return value

    def clear(self) -> None:
        """Drop every table (the graph changed): :attr:`version` goes up."""
        self.version += 1
        self._tables.clear()
