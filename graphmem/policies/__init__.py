"""Traversal policies. Importing this package registers every built-in policy."""

from graphmem.policies.base import POLICIES, Budget, Query, Retrieval, TraversalPolicy, make_policy, register_policy

__all__ = ["POLICIES", "Budget", "Query", "Retrieval", "TraversalPolicy", "make_policy", "register_policy"]
