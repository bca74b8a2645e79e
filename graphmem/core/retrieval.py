"""What a policy sees and what it returns: :class:`Query`, :class:`Budget`, :class:`Retrieval`, :class:`RetrievalBatch`.

A policy receives the query text and embedding and the budget only: :class:`Query` has no field
for gold evidence, answers or categories, so no policy can reach them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Sequence

import torch
from torch import Tensor

from graphmem.core.budget import Budget  # noqa: F401  (re-exported: a policy's view of the budget)
from graphmem.core.errors import InputError
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import more_tokens_than

MAX_QUERY_TOKENS = 131_072
"""The longest question a policy is given, in tokens of :data:`graphmem.core.tokens.TOKENIZER_NAME` (2^17, about
100,000 words): the query-side passes (tokens, lexical kinds, BM25 terms) are linear in it, so a question of this
length is served in well under a second, and a longer one is refused when its :class:`Query` is made."""


class QueryTooLongError(InputError, ValueError):
    """A query text longer than :data:`MAX_QUERY_TOKENS` tokens (the message names the query)."""


@dataclass(frozen=True)
class Query:
    """What a policy may see of a question: an id, the text and its embedding. A text of more than
    :data:`MAX_QUERY_TOKENS` tokens raises :class:`QueryTooLongError`, one line naming the query."""

    qid: str
    text: str
    embedding: Tensor

    def __post_init__(self) -> None:
        if isinstance(self.text, str) and more_tokens_than(self.text, MAX_QUERY_TOKENS):
            raise QueryTooLongError(
                f"query {self.qid!r}: its text holds more than MAX_QUERY_TOKENS={MAX_QUERY_TOKENS:,} tokens "
                f"({len(self.text):,} characters): refused (shorten the question)"
            )


@dataclass
class Retrieval:
    """Loaded nodes in load order, the policy's ranked list of them, and the trace GraphMemory
    Appendix B.2 records.

    ``loaded`` is the load order (the trace: what the budget admitted, in the order it was
    admitted); ``ranked`` is the policy's returned list, the same nodes most relevant first, which
    every rank-dependent metric reads. Left ``None`` it is the load order: a policy that reports
    no ranking (the heuristics) ranks its nodes as it loaded them.
    """

    loaded: list[int]
    entries: list[int]
    edges_considered: list[int] = field(default_factory=list)
    edges_traversed: list[int] = field(default_factory=list)
    loaded_tokens: int = 0
    max_depth: int = 0
    wall_time_s: float = 0.0
    scores: list[float] | None = None
    ranked: list[int] | None = None

    def __post_init__(self) -> None:
        if self.ranked is None:
            self.ranked = list(self.loaded)
        elif sorted(self.ranked) != sorted(self.loaded):
            extra = sorted(set(self.ranked) ^ set(self.loaded))[:5]
            raise ValueError(
                f"Retrieval.ranked must hold the loaded nodes, each once: {len(self.ranked)} ranked, "
                f"{len(self.loaded)} loaded, rows in one list only: {extra}"
            )

    def loaded_ids(self, graph: MemoryGraph) -> list[str]:
        """Node ids of ``loaded``, in load order."""
        return [graph.node_ids[i] for i in self.loaded]

    def ranked_ids(self, graph: MemoryGraph) -> list[str]:
        """Node ids of ``ranked``, most relevant first (the list the metrics score)."""
        return [graph.node_ids[i] for i in self.ranked]

    def to_json(self, graph: MemoryGraph) -> dict:
        ids = graph.node_ids
        return {
            "ranked": [ids[i] for i in self.ranked],
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
        }


def split_list(flat: list, counts: Sequence[int]) -> list[list]:
    """Cut ``flat`` into consecutive pieces of the given lengths."""
    ends = list(accumulate(counts))
    return [flat[e - c : e] for e, c in zip(ends, counts)]


@dataclass
class RetrievalBatch:
    """The retrievals of ``B`` queries as flat tensors, as a PyG ``Batch`` holds many graphs.

    Each ragged field is a flat value tensor with an owner tensor naming the query of each item,
    grouped by query in increasing order, as PyG's ``batch`` vector is (:func:`group_by_query`
    sorts items that a policy produced interleaved); each query's items keep their order (load
    order, inspection order). Rows and edge ids are those of the graph the batch was computed on (a
    graph batch's union); :meth:`shift` moves them into each query's own graph and :meth:`split`
    makes one :class:`Retrieval` per query (PyG's ``to_data_list``).

    Args:
        entries: ``[B, K]`` entry rows, ``-1`` padded; or an int ``k``: each query's first ``k``
            loaded nodes (a policy without entry selection).
        tokens: ``[B]`` loaded tokens.
        query: ``[L]`` query of each loaded node.
        loaded: ``[L]`` loaded node rows.
        depth: ``[L]`` hops from an entry of each loaded node (``max_depth`` is their maximum);
            ``None``: all 0.
        considered: ``([C] query, [C] edge id)`` of every edge the policy inspected (``None``: none).
        traversed: ``([T] query, [T] edge id)`` of the edges along which nodes were loaded (``None``: none).
        scores: ``[L]`` the policy's score of each loaded node at load time, or ``None`` if it
            reports none.
        rank: ``[L]`` the policy's relevance of each loaded node, higher first: :meth:`split`
            orders each query's loaded nodes by it (descending; ties keep load order) into
            :attr:`Retrieval.ranked`. ``None``: the load order is the ranking.
    """

    entries: Tensor | int
    tokens: Tensor
    query: Tensor
    loaded: Tensor
    depth: Tensor | None = None
    considered: tuple[Tensor, Tensor] | None = None
    traversed: tuple[Tensor, Tensor] | None = None
    scores: Tensor | None = None
    rank: Tensor | None = None

    def __post_init__(self) -> None:
        if self.rank is not None and self.rank.shape != self.loaded.shape:
            raise ValueError(
                f"RetrievalBatch.rank has shape {tuple(self.rank.shape)}; it needs one value per loaded node, "
                f"shape {tuple(self.loaded.shape)}"
            )

    @property
    def num_queries(self) -> int:
        return int(self.tokens.shape[0])

    def shift(self, node_off: Tensor, edge_off: Tensor) -> RetrievalBatch:
        """The same retrievals in the node rows and edge ids of each query's own graph of a union.

        Row ``v`` of the union is row ``v - node_off[b]`` of query ``b``'s graph, edge ``e`` is edge
        ``e - edge_off[b]`` (``Scope.node_offset`` / ``Scope.edge_offset``).
        """
        move = lambda pair: None if pair is None else (pair[0], pair[1] - edge_off[pair[0]])  # noqa: E731
        entries = self.entries
        if isinstance(entries, Tensor):
            entries = torch.where(entries >= 0, entries - node_off[:, None], -1)
        return RetrievalBatch(
            entries=entries,
            tokens=self.tokens,
            query=self.query,
            loaded=self.loaded - node_off[self.query],
            depth=self.depth,
            considered=move(self.considered),
            traversed=move(self.traversed),
            scores=self.scores,
            rank=self.rank,
        )

    def ranked_order(self) -> Tensor:
        """``[L]`` positions of the items, each query's by descending ``rank``, ties in load order.

        One stable argsort of all items by ``(query, -rank)``, packed in one int64 key
        ``query · 2³² + (2³¹ − 1 − m(rank))``, where ``m`` maps a float32 to an int32 in the same
        order (its bits, with the magnitude bits flipped for a negative value; ``-0.0`` is ``0.0``).
        The items are grouped by query already, so each query keeps its own span. A rank that
        float32 does not hold exactly (float64, integers) is sorted by two stable argsorts instead
        (by ``-rank``, then by query). Without ``rank``: the identity. A NaN rank is refused.
        """
        rank = self.rank
        if rank is None:
            return torch.arange(self.loaded.numel(), device=self.loaded.device)
        nan = int(torch.isnan(rank).sum()) if rank.is_floating_point() else 0
        if nan:
            raise ValueError(f"RetrievalBatch.rank has {nan} NaN values; a rank must be a number")
        if rank.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            by_rank = torch.argsort(-rank.to(torch.float64), stable=True)
            return by_rank[torch.argsort(self.query[by_rank], stable=True)]
        if self.tokens.shape[0] == 1:  # one query: the same order, by one stable sort of -rank (-0.0 is 0.0)
            return torch.argsort(-(rank.to(torch.float32) + 0.0), stable=True)
        bits = (rank.to(torch.float32) + 0.0).view(torch.int32).long()
        ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
        return torch.argsort((self.query.long() << 32) + ((1 << 31) - 1 - ordered), stable=True)

    def split(self) -> list[Retrieval]:
        """One :class:`Retrieval` per query, with one ``tolist`` per field; ``ranked`` is each
        query's loaded nodes in :meth:`ranked_order`."""
        b = self.num_queries
        counts = torch.bincount(self.query, minlength=b).tolist()
        loaded = split_list(self.loaded.tolist(), counts)
        if self.rank is None:
            ranked: list[list[int] | None] = [None] * b  # each Retrieval copies its load order
        else:
            ranked = split_list(self.loaded[self.ranked_order()].tolist(), counts)
        scores = split_list(self.scores.tolist(), counts) if self.scores is not None else [None] * b
        if self.depth is None:
            depth = [0] * b
        else:
            zero = torch.zeros(b, dtype=torch.long, device=self.query.device)
            depth = zero.scatter_reduce(0, self.query, self.depth, "amax").tolist()
        if isinstance(self.entries, int):
            ent = [rows[: self.entries] for rows in loaded]
        else:
            ent = self.entries.tolist()
            if bool((self.entries < 0).any()):
                ent = [[v for v in row if v >= 0] for row in ent]
        considered, traversed = _per_query(self.considered, b), _per_query(self.traversed, b)
        return [
            Retrieval(
                loaded=loaded[i],
                entries=ent[i],
                edges_considered=considered[i],
                edges_traversed=traversed[i],
                loaded_tokens=tokens,
                max_depth=depth[i],
                scores=scores[i],
                ranked=ranked[i],
            )
            for i, tokens in enumerate(self.tokens.tolist())
        ]


SORT_BELOW = 4096  # merge_by_query sorts at most this many items instead of placing them


def group_by_query(query: Tensor, *values: Tensor) -> tuple[Tensor, ...]:
    """``(query, *values)`` stably sorted by query: each query's items grouped, in their order."""
    order = torch.argsort(query, stable=True)
    return (query[order],) + tuple(v[order] for v in values)


def merge_by_query(parts: Sequence[tuple[Tensor, ...]], b: int) -> tuple[Tensor, ...]:
    """Parts ``(query, *values)``, each grouped by query already (e.g. one per hop), as one such
    tuple grouped by query, a query's items in part order, without sorting.

    Item ``i`` of a part goes to its query's start, plus that query's items in earlier parts,
    plus its rank in the part (``i`` minus the part's first index of its query). Few items are
    grouped with one stable sort instead (the same result, in fewer tensor operations).
    """
    n = sum(int(p[0].numel()) for p in parts)
    if n <= SORT_BELOW:
        return group_by_query(*(torch.cat(f) for f in zip(*parts)))
    counts = [torch.bincount(p[0], minlength=b) for p in parts]
    offset = torch.cumsum(sum(counts), 0) - sum(counts)
    out = [torch.empty(n, dtype=v.dtype, device=v.device) for v in parts[0]]
    for p, c in zip(parts, counts):
        q = p[0]
        dest = offset[q] + torch.arange(q.numel(), device=q.device) - (torch.cumsum(c, 0) - c)[q]
        for o, v in zip(out, p):
            o[dest] = v
        offset = offset + c
    return tuple(out)


def _per_query(pair: tuple[Tensor, Tensor] | None, b: int) -> list[list]:
    """The values of ``(owner, values)`` (grouped by owner) as one list per query ``0 .. b-1``."""
    if pair is None:
        return [[] for _ in range(b)]
    owner, values = pair
    return split_list(values.tolist(), torch.bincount(owner, minlength=b).tolist())
