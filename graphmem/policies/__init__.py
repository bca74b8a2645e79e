"""Traversal policies. Importing this package registers every built-in policy."""

from graphmem.policies import beta_bfs, dense_topk, gnn, ppr, router, uniform_bfs  # noqa: F401,E402  (register)
from graphmem.policies.base import POLICIES, Budget, Query, Retrieval, TraversalPolicy, make_policy, register_policy
from graphmem.policies.entries import ENTRY_SELECTORS, EntrySelector, make_entry_selector, register_entry_selector

__all__ = [
    "ENTRY_SELECTORS",
    "POLICIES",
    "Budget",
    "EntrySelector",
    "Query",
    "Retrieval",
    "TraversalPolicy",
    "make_entry_selector",
    "make_policy",
    "register_entry_selector",
    "register_policy",
]
