"""The contract every traversal policy implements: the base class owns the loop, a policy fills one hook.

A policy maps ``(graph, queries, budget)`` to :class:`Retrieval` objects. :class:`TraversalPolicy`
writes the plumbing once, as Stable-Baselines3's ``learn`` calls ``collect_rollouts`` and PyG's
``propagate`` calls ``message``:

1. guard (no queries, an empty graph) and timing (each result gets an equal share of the call);
2. the :class:`~graphmem.policies.scope.Scope` of the call: one graph, or the disjoint union of
   many (:meth:`TraversalPolicy.retrieve_graphs`);
3. entry selection with the policy's ``entry_selector`` (each query from its own graph);
4. the policy's :meth:`TraversalPolicy.traverse` hook: its algorithm, for all queries at once, in
   the union's rows and edge ids, returning a :class:`RetrievalBatch`;
5. results shifted into each query's own graph and split into :class:`Retrieval` objects.

``retrieve(graph, query, budget)`` is ``retrieve_batch(graph, [query], budget)[0]``: production
code runs what evaluation measures. The per-query reference implementations that the batched
paths are tested against are ``scripts/benchmarks/policy_references.py``.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Mapping, Sequence

import torch
from torch import Tensor

from graphmem.core.device import resolve_device
from graphmem.core.graph import MemoryGraph
from graphmem.core.registry import Registry
from graphmem.core.retrieval import Budget, Query, Retrieval, RetrievalBatch
from graphmem.policies.scope import Scope
from graphmem.policies.selectors import EntrySelector, entry_rows, entry_tensor
from graphmem.store.checkpoint import require_checkpoint

__all__ = [
    "POLICIES",
    "Budget",
    "Query",
    "Retrieval",
    "RetrievalBatch",
    "Scope",
    "TraversalPolicy",
    "make_policy",
    "register_policy",
    "resolve_device",
]


class TraversalPolicy(ABC):
    """Base class of every policy (see module docstring). A subclass sets its attributes in
    ``__init__`` and implements :meth:`traverse`.

    Attributes:
        name: the registered name (set by :func:`register_policy`).
        device: where the policy's tensors live (resolve it first: :func:`resolve_device`).
        entry_selector: chooses the entries handed to :meth:`traverse`; ``None``: no entries.
        pack_queries: packing hint for :meth:`retrieve_graphs`: a graph with more queries than
            this runs by itself (its own batch is wide enough); ``None``: no limit.
    """

    name: ClassVar[str] = "base"
    device: torch.device = torch.device("cpu")
    entry_selector: EntrySelector | None = None
    pack_queries: int | None = None

    @abstractmethod
    def traverse(self, scope: Scope, entries: Tensor | None, budget: Budget) -> RetrievalBatch:
        """The policy's algorithm for every query of ``scope`` at once.

        Args:
            scope: the queries and the graph (``scope.graph``, the union of the call's graphs).
            entries: ``[B, <=max_entries]`` entry rows of ``scope.graph`` (``-1`` padded), valid and
                distinct, each from its query's own graph; ``None`` without an ``entry_selector``.
            budget: the limits every retrieval must obey.

        Returns:
            The retrievals in ``scope.graph``'s node rows and edge ids, on ``scope.device``.
        """

    # ------------------------------------------------------------------ the loop, written once
    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """One query: ``retrieve_batch(graph, [query], budget)[0]``."""
        return self.retrieve_batch(graph, [query], budget)[0]

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """All ``queries`` over one ``graph`` in one batched call."""
        if not queries:
            return []
        t0 = time.perf_counter()
        return _timed(self.retrieve_scope(Scope.single(graph, queries, self.device), budget), t0)

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """``queries[c]`` over ``graphs[c]`` for every ``c``, in one batched call over the graphs'
        disjoint union (:mod:`graphmem.core.graph_batch`); a walk never leaves its own graph, so the results
        are those of one :meth:`retrieve_batch` per graph.

        A graph with more than ``pack_queries`` queries, an empty graph, and a graph that would be
        alone in the union make their own :meth:`retrieve_batch`.
        """
        if len(graphs) != len(queries):
            raise ValueError(f"retrieve_graphs: {len(graphs)} graphs but {len(queries)} query lists")
        limit = self.pack_queries
        together = [
            i
            for i, (g, qs) in enumerate(zip(graphs, queries))
            if qs and g.num_nodes and (limit is None or len(qs) <= limit)
        ]
        if len(together) < 2:
            together = []
        joined = set(together)
        out = [
            [] if i in joined else self.retrieve_batch(g, qs, budget) for i, (g, qs) in enumerate(zip(graphs, queries))
        ]
        if together:
            t0 = time.perf_counter()
            scope = Scope.union([graphs[i] for i in together], [queries[i] for i in together], self.device)
            results = _timed(self.retrieve_scope(scope, budget), t0)
            start = 0
            for i, count in zip(together, scope.counts):
                out[i] = results[start : start + count]
                start += count
        return out

    def retrieve_scope(self, scope: Scope, budget: Budget, entries: Tensor | None = None) -> list[Retrieval]:
        """Entries (unless given, as :meth:`select_entries` returns them), :meth:`traverse`, and the
        results in each query's own graph; no timing."""
        if scope.graph.num_nodes == 0:
            return [Retrieval(loaded=[], entries=[]) for _ in scope.queries]
        if entries is None:
            entries = self.select_entries(scope, budget)
        with torch.no_grad():
            batch = self.traverse(scope, entries, budget)
        if scope.num_graphs > 1:  # a single graph is its own union: nothing moves
            batch = batch.shift(scope.node_offset, scope.edge_offset)
        return batch.split()

    def select_entries(self, scope: Scope, budget: Budget) -> Tensor | None:
        """``[B, <=max_entries]`` entry rows of ``scope.graph`` from ``entry_selector`` (``None`` without one)."""
        if self.entry_selector is None:
            return None
        return entry_rows(self.entry_selector, scope, budget)

    def retrieve_from_entries(
        self, graph: MemoryGraph, queries: Sequence[Query], entries: Tensor | Sequence[Sequence[int]], budget: Budget
    ) -> list[Retrieval]:
        """The traversal alone, from given entry rows of ``graph`` (lists are validated: invalid or
        repeated rows are discarded, at most ``max_entries`` kept); entry selection is skipped."""
        if self.entry_selector is None:
            raise ValueError(f"policy {self.name!r} has no entry selector, so it cannot start from given entries")
        if not queries:
            return []
        t0 = time.perf_counter()
        scope = Scope.single(graph, queries, self.device)
        return _timed(self.retrieve_scope(scope, budget, entry_tensor(graph, entries, budget, self.device)), t0)


def _timed(results: list[Retrieval], t0: float) -> list[Retrieval]:
    """Set every result's ``wall_time_s`` to its share of the time since ``t0`` (one batched call)."""
    per_query = (time.perf_counter() - t0) / max(len(results), 1)
    for r in results:
        r.wall_time_s = per_query
    return results


POLICIES = Registry("policy", base=TraversalPolicy)
register_policy = POLICIES.register


def policy_label(target: str) -> str:
    """The name a policy class is reported under: its registered name, else its class name.

    ``target`` is a registered name or a dotted path (``_target_``); one that cannot be imported
    keeps its last component (the import error is raised where the policy is made)."""
    try:
        cls = POLICIES.resolve(target)
    except ValueError:
        return target.rpartition(".")[2]
    return cls.name if POLICIES.get(cls.name) is cls else cls.__name__


def make_policy(target: str | Mapping[str, Any], **kwargs: Any) -> TraversalPolicy:
    """The one way a policy is built by name.

    ``target`` is a registered name or a dotted path to a :class:`TraversalPolicy` subclass, or a config
    mapping holding it under ``_target_`` beside keyword arguments (what :func:`graphmem.config.cli.policy_config`
    gives; ``kwargs`` override them). The arguments are checked against the constructor first (``ValueError``
    naming the key) and a ``checkpoint`` path must be a file (:class:`~graphmem.store.checkpoint.CheckpointError`
    naming it); the policy reports under :func:`policy_label` of its target."""
    import graphmem.policies  # noqa: F401  (registers the built-in policies)

    if isinstance(target, Mapping):
        kwargs = {**{k: v for k, v in target.items() if k not in ("_target_", "name")}, **kwargs}
        target = target["_target_"]
    cls = POLICIES.check(target, kwargs)
    if isinstance(kwargs.get("checkpoint"), (str, os.PathLike)):
        require_checkpoint(kwargs["checkpoint"])
    policy = cls(**kwargs)
    label = policy_label(target)
    if policy.name != label:
        policy.name = label  # an unregistered class: its results carry its class name
    return policy
