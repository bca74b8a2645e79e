"""Per-node state of a graph kept across its mutations while its rows are only appended to.

A table built from every node's own fields (its token count, its speaker and sequence codes) costs a pass
of Python over every node; a live memory grows by a few records at a time and drops its derived tables on
every write. :func:`kept_rows` keeps such a state in ``graph.indexes`` (which survives mutations) with the
row sources it was made from, and on the next call adds only the rows appended since.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


def kept_rows(graph, key: str, sources: Sequence[list], extend: Callable[[Any, range], Any]) -> Any:
    """``extend(state, rows)`` over every row of ``graph``, kept in ``graph.indexes[key]``.

    ``sources`` are lists aligned with the graph's rows that the state is made from (e.g. ``[graph.node_ids,
    graph.texts]``); ``extend(None, range(n))`` makes the state of rows ``0..n-1`` and ``extend(state,
    range(m, n))`` adds rows ``m..n-1`` to the state of the first ``m`` (it may reuse ``state``'s storage: the
    state it is given is not read again). While the sources are the lists the kept state was made from and the
    graph's log (:attr:`~graphmem.core.graph.MemoryGraph.node_log`) holds only appended rows since (and new
    embeddings or edge edits, which no row's state reads), only the rows after them are added, in time that does
    not grow with the graph; any other change (a row removed, a text or metadata revised, a source list
    replaced) makes the state anew, so the state is always the one a pass over every row gives (rows edited in
    place without the log are outside this contract, as for the graph's other kept indexes)."""
    n = len(sources[0])
    held = graph.indexes.get(key)
    if held is not None:
        lists, m, at, state = held
        if all(a is b for a, b in zip(lists, sources)) and graph.rows_appended_since(at, m, ("revise", "edges")):
            state = extend(state, range(m, n)) if m < n else state
        else:
            held = None
    if held is None:
        state = extend(None, range(n))
    graph.indexes[key] = (list(sources), n, len(graph.node_log), state)
    return state


def append_to(buf: np.ndarray, used: int, new: np.ndarray) -> np.ndarray:
    """``buf`` with ``new`` written after its first ``used`` entries, reallocated (capacity doubling) when full:
    amortised ``O(len(new))``. The first ``used`` entries are never written again, so a view of them stays."""
    need = used + new.size
    if need > buf.size:
        grown = np.empty(max(need, 2 * buf.size, 16), dtype=buf.dtype)
        grown[:used] = buf[:used]
        buf = grown
    buf[used:need] = new
    return buf


def seed_rows(graph, key: str, sources: Sequence[list], state: Any) -> None:
    """Keep ``state`` as :func:`kept_rows`' state of every row of ``graph`` (one made from ``sources`` before and
    saved with them, as a memory's saved state is), so that the next call adds only the rows appended after."""
    graph.indexes[key] = (list(sources), len(sources[0]), len(graph.node_log), state)
