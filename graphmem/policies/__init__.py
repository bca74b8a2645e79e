"""Traversal policies. Importing this package registers every built-in policy (the one registration
mechanism: the :func:`register_policy` decorator, run when a policy's module is imported)."""

from graphmem.policies import beta_bfs, bm25, dense_topk, gnn, hybrid, ppr, router, uniform_bfs  # noqa: E402,F401,I001  (register)
from graphmem.policies.base import (
    POLICIES,
    Budget,
    Query,
    Retrieval,
    RetrievalBatch,
    Scope,
    TraversalPolicy,
    make_policy,
    register_policy,
)
from graphmem.policies.selectors import ENTRY_SELECTORS, EntrySelector, make_entry_selector, register_entry_selector

__all__ = [
    "ENTRY_SELECTORS",
    "POLICIES",
    "Budget",
    "EntrySelector",
    "Query",
    "Retrieval",
    "RetrievalBatch",
    "Scope",
    "TraversalPolicy",
    "make_entry_selector",
    "make_policy",
    "register_entry_selector",
    "register_policy",
]
