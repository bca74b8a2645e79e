"""Floor baseline: Algorithm 1 with the neighbor choice made uniformly at random.

Same entries, queue, visited set, hop/node/token budget and trace as :mod:`beta_bfs`; at each
expanded node ``v``, the ``min(top_k_neighbors, deg)`` distinct out-neighbors ``u`` (parallel edges
counted once, the lowest edge id kept) with the smallest priorities

    key_q(v, u) = splitmix64(s_q xor (v * c1) xor (u * c2)) >> 1,   s_q = blake2b(f"{seed}:{qid}")

(64-bit wrapping arithmetic; ties by ascending string id) are pushed in ascending key order. The
keys are a counter-based hash, so this is a uniform draw without replacement that depends only on
the query id, the graph and the seed: deterministic, independent of batch order, and computable
for all queries and nodes of a batch at once.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import csr_positions, level_bfs, rank_in_group, segment_topk
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.tables import distinct_neighbors, token_counts


def query_seed(seed: int, qid: str) -> int:
    """Stable 64-bit seed from ``seed`` and the query id (not Python's salted ``hash``)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{qid}".encode(), digest_size=8).digest(), "little")


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as the unsigned ``value``."""
    return value - (1 << 64) if value >= 1 << 63 else value


_C1, _C2 = _signed(0x9E3779B97F4A7C15), _signed(0xC2B2AE3D27D4EB4F)
_M1, _M2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shift_right(x: Tensor, s: int) -> Tensor:
    """Logical right shift of the 64 bits of int64 ``x``."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def neighbor_priority(seed: Tensor, v: Tensor, u: Tensor) -> Tensor:
    """``key_q(v, u)`` of the module docstring, elementwise over int64 tensors holding the 64-bit
    words (``seed`` as :func:`_signed` of the unsigned seed); int64 result in ``[0, 2^63)``.

    int64 multiplication wraps modulo ``2^64`` and xor acts on the bits, so this is the unsigned
    arithmetic of the formula on any device.
    """
    x = seed ^ (v * _C1) ^ (u * _C2)
    x = (x ^ _shift_right(x, 30)) * _M1
    x = (x ^ _shift_right(x, 27)) * _M2
    x = x ^ _shift_right(x, 31)
    return _shift_right(x, 1)


@register_policy("uniform_bfs")
class UniformBFS(TraversalPolicy):
    """Bounded BFS with uniformly random neighbor choice (see module docstring).

    Args:
        seed: base seed mixed with each query id (default: ``0``).
        entry_selector: entry selector name or instance (default: ``"embedding"``).
        device: where the traversal runs (default: ``"cpu"``).
    """

    def __init__(
        self, seed: int = 0, entry_selector: SelectorSpec = "embedding", device: str | torch.device = "cpu"
    ) -> None:
        self.device = resolve_device(device)
        self.seed = int(seed)
        self.entry_selector = make_entry_selector(entry_selector)

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """Algorithm 1 as tensor levels, each level's draws hashed for all (query, node, neighbor)
        triples at once, with the rows the nodes have in their own graph (so a graph batch draws
        what each graph alone would)."""
        graph, dev, k = scope.graph, scope.device, budget.top_k_neighbors
        seeds = torch.tensor(
            [_signed(query_seed(self.seed, q.qid)) for q in scope.queries], dtype=torch.long, device=dev
        )
        rowptr, target, edge = distinct_neighbors(graph, device=dev)

        def expand(rows: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
            seg, pos = csr_positions(rowptr, nodes)
            u, off = target[pos], scope.node_offset[rows[seg]]
            kept = segment_topk(-neighbor_priority(seeds[rows[seg]], nodes[seg] - off, u - off), seg, k)
            owner = seg[kept]
            rank, _ = rank_in_group(owner, nodes.numel())
            tgt = torch.full((nodes.numel(), k), -1, dtype=torch.long, device=dev)
            via = torch.full_like(tgt, -1)
            tgt[owner, rank] = u[kept]
            via[owner, rank] = edge[pos[kept]]
            return tgt, via

        return level_bfs(entries, token_counts(graph, dev), budget, expand).result(graph, entries, budget)
