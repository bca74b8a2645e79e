"""Per-node state of a graph kept across its mutations while its rows are only appended to.

A table built from every node's own fields (its token count, its speaker and sequence codes) costs a pass
of Python over every node; a live memory grows by a few records at a time and drops its derived tables on
every write. :func:`kept_rows` keeps such a state in ``graph.indexes`` (which survives mutations) with the
row sources it was made from, and on the next call adds only the rows appended since.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence


def kept_rows(graph, key: str, sources: Sequence[list], extend: Callable[[Any, range], Any]) -> Any:
    """``extend(state, rows)`` over every row of ``graph``, kept in ``graph.indexes[key]``.

    ``sources`` are lists aligned with the graph's rows that the state is made from (e.g. ``[graph.node_ids,
    graph.texts]``); ``extend(None, range(n))`` makes the state of rows ``0..n-1`` and ``extend(state,
    range(m, n))`` adds rows ``m..n-1`` to the state of the first ``m``. When the rows the kept state was made
    from are still the leading rows (each source holds the same objects there: a revised text or metadata
    is a new object) only the rows after them are added; any other change (a row removed or revised) makes
    the state anew, so the state is always the one a pass over every row gives."""
    n = len(sources[0])
    held = graph.indexes.get(key)
    if held is not None:
        old, state = held
        m = len(old[0])
        if m <= n and all(all(map(operator.is_, new[:m], was)) for new, was in zip(sources, old)):
            state = extend(state, range(m, n)) if m < n else state
        else:
            held = None
    if held is None:
        state = extend(None, range(n))
    graph.indexes[key] = ([list(s) for s in sources], state)
    return state
