"""The contract every traversal policy implements.

A policy maps ``(graph, query, budget)`` to a :class:`Retrieval`. It receives the query text and
embedding and the budget only: :class:`Query` has no field for gold evidence, answers or
categories, so no policy can reach them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.registry import Registry
from graphmem.tokens import TOKENIZER_NAME


@dataclass(frozen=True)
class Query:
    """What a policy may see of a question: an id, the text and its embedding."""

    qid: str
    text: str
    embedding: Tensor


@dataclass(frozen=True)
class Budget:
    """Retrieval limits shared by every policy (GraphMemory Appendix B.2 defaults).

    Args:
        max_entries: entry nodes chosen before traversal (default: 6).
        top_k_neighbors: neighbours of a loaded node considered (default: 2).
        max_hops: hops from an entry node (default: 2).
        max_nodes: loaded nodes (default: 12).
        max_tokens: tokens of serialized content, counted with ``tokenizer`` (default: 2500).
        tokenizer: name of the token counting rule (default: ``regex-word-v1``).
    """

    max_entries: int = 6
    top_k_neighbors: int = 2
    max_hops: int = 2
    max_nodes: int = 12
    max_tokens: int = 2500
    tokenizer: str = TOKENIZER_NAME

    def __post_init__(self) -> None:
        for name in ("max_entries", "top_k_neighbors", "max_hops", "max_nodes", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Budget.{name} must be a non-negative integer, got {value!r}")
        if self.max_entries == 0 or self.max_nodes == 0:
            raise ValueError("Budget.max_entries and Budget.max_nodes must be at least 1")
        if self.tokenizer != TOKENIZER_NAME:
            raise ValueError(
                f"Budget.tokenizer {self.tokenizer!r} is unknown; the only tokenizer is {TOKENIZER_NAME!r}"
            )


@dataclass
class Retrieval:
    """Loaded nodes in load order plus the trace GraphMemory Appendix B.2 records."""

    loaded: list[int]
    entries: list[int]
    edges_considered: list[int] = field(default_factory=list)
    edges_traversed: list[int] = field(default_factory=list)
    loaded_tokens: int = 0
    max_depth: int = 0
    wall_time_s: float = 0.0
    fallback_used: bool = False
    scores: list[float] | None = None

    def loaded_ids(self, graph: MemoryGraph) -> list[str]:
        return [graph.node_ids[i] for i in self.loaded]

    def to_json(self, graph: MemoryGraph) -> dict:
        ids = graph.node_ids
        return {
            "loaded": [ids[i] for i in self.loaded],
            "entries": [ids[i] for i in self.entries],
            "edges_considered": len(self.edges_considered),
            "edges_traversed": [
                [
                    ids[int(graph.edge_index[0, e])],
                    ids[int(graph.edge_index[1, e])],
                    graph.relations[int(graph.edge_type[e])],
                ]
                for e in self.edges_traversed
            ],
            "loaded_tokens": self.loaded_tokens,
            "max_depth": self.max_depth,
            "wall_time_s": self.wall_time_s,
            "fallback_used": self.fallback_used,
        }


def resolve_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, with ``"auto"`` = ``cuda`` when available, else ``cpu``; a CUDA device
    is refused with a clear error where CUDA is not available."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} requested, but CUDA is not available here")
    return dev


def load_under_budget(graph: MemoryGraph, ranked: Sequence[int], budget: Budget) -> tuple[list[int], int]:
    """Load nodes in ``ranked`` order, skipping any that would break the node or token budget."""
    tokens = graph.node_tokens()
    loaded, used, seen = [], 0, set()
    for v in ranked:
        if len(loaded) >= budget.max_nodes:
            break
        if v in seen:
            continue
        seen.add(v)
        t = int(tokens[v])
        if used + t <= budget.max_tokens:
            loaded.append(v)
            used += t
    return loaded, used


def share_wall_time(results: list[Retrieval], t0: float) -> list[Retrieval]:
    """Set every result's ``wall_time_s`` to its share of the time since ``t0`` (one batched call)."""
    per_query = (time.perf_counter() - t0) / max(len(results), 1)
    for r in results:
        r.wall_time_s = per_query
    return results


class TraversalPolicy:
    """Base class: subclasses implement :meth:`retrieve`; :meth:`retrieve_batch` may be overridden."""

    name: ClassVar[str] = "base"

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        raise NotImplementedError

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """Reference batched form: one :meth:`retrieve` per query."""
        return [self.retrieve(graph, q, budget) for q in queries]

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """Retrievals for the queries of many graphs, ``queries[c]`` asked over ``graphs[c]``.

        This form makes one :meth:`retrieve_batch` per graph. Policies whose batched work can span
        graphs override it with one call over the graphs' disjoint union
        (:mod:`graphmem.graph_batch`); the results are the same.
        """
        if len(graphs) != len(queries):
            raise ValueError(f"retrieve_graphs: {len(graphs)} graphs but {len(queries)} query lists")
        return [self.retrieve_batch(g, qs, budget) for g, qs in zip(graphs, queries)]


POLICIES = Registry("policy")
register_policy = POLICIES.register


def make_policy(name: str, **kwargs) -> TraversalPolicy:
    """Instantiate a registered policy by name."""
    import graphmem.policies  # noqa: F401  (registers the built-in policies)

    return POLICIES.make(name, **kwargs)


class Timer:
    """``with Timer() as t: ...; t.seconds``"""

    def __enter__(self):
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self._t0


def cosine_to_nodes(graph: MemoryGraph, query: Query) -> Tensor:
    """``[N]`` cosine similarity of the query to every node embedding."""
    q = torch.nn.functional.normalize(query.embedding.float().flatten(), dim=0)
    x = torch.nn.functional.normalize(graph.embeddings, dim=1)
    return x @ q
