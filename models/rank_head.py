"""RankHead: the learned router's relevance of each node of its list, the order a reader cuts at ``k``.

The walk decides *what* is loaded; this head decides in which order the loaded nodes are returned.
Every item ``v`` of a query's list (the walk's loads, plus hard negatives while training) has a
feature row ``f_v`` (:mod:`graphmem.policies.rank_features`: cosine, lexical match, the walk's score
and depth, the entry rank, and what the list's other nodes adjacent to ``v`` look like). With
``N(v)`` the items of the same list adjacent to ``v`` in the graph (either direction):

    h_v = MLP_1(f_v)                                     item state, H units
    m_v = max_{u ∈ N(v)} h_u          (0 when N(v) is empty)   one message over the list's own edges
    r_v = cos(q, x_v) + w · ReLU(W [h_v ; m_v] + b)      relevance; ``w`` starts at 0

so the untrained head ranks by cosine, and the message lets a passage reached through a relevant
neighbour (the bridge of a two-hop question) rise above one that only resembles the query. Training
(:mod:`rl.walk.rank`) is listwise: a softmax over each query's items against the uniform
distribution over its gold items (ListNet's top-one cross entropy).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

RESIDUALS = {"cosine": (0, 1.0), "walk_score": (7, 1.0), "load_order": (14, -1.0)}
"""The residual ``ρ_v`` each head can start from: (column of ``f_v``, sign): ``cos(q, x_v)``, the walk's score
at load ``s_v``, or ``−min(slot_v, 12) / 12`` (the load order, negatives last)."""


@dataclass
class RankInputs:
    """The items of every query's list, grouped by query.

    Attributes:
        features: ``[M, F]`` feature rows.
        query: ``[M]`` query row of each item (non-decreasing).
        node: ``[M]`` node row of each item (the scope's rows).
        loaded: ``[M]`` bool, loaded by the walk (the rest are hard negatives).
        slot: ``[M]`` the item's position in its query's load order (``-1`` for negatives).
        src, dst: ``[P]`` item pairs of one list whose nodes are adjacent (both directions listed).
    """

    features: Tensor
    query: Tensor
    node: Tensor
    loaded: Tensor
    slot: Tensor
    src: Tensor
    dst: Tensor

    def to(self, device: str | torch.device) -> RankInputs:
        return RankInputs(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))

    def select(self, keep: Tensor) -> RankInputs:
        """The items where ``keep`` is true (their pairs kept when both ends are)."""
        index = torch.full((keep.numel(),), -1, dtype=torch.long, device=keep.device)
        index[keep] = torch.arange(int(keep.sum()), device=keep.device)
        both = keep[self.src] & keep[self.dst]
        f = (self.features, self.query, self.node, self.loaded, self.slot)
        return RankInputs(*(t[keep] for t in f), index[self.src[both]], index[self.dst[both]])


@dataclass
class RankHeadConfig:
    """Shape of a :class:`RankHead`."""

    num_features: int
    """F, the feature columns (:data:`graphmem.policies.rank_features.NUM_RANK_FEATURES`)"""
    hidden: int = 32
    """H, the item state size"""
    residual: str = "cosine"
    """what the untrained head ranks by, :data:`RESIDUALS`"""

    def __post_init__(self) -> None:
        if self.residual not in RESIDUALS:
            raise ValueError(f"rank head residual {self.residual!r} is not one of {sorted(RESIDUALS)}")


class RankHead(nn.Module):
    """``r_v`` of the module docstring for every item of :class:`RankInputs`."""

    def __init__(self, config: RankHeadConfig):
        super().__init__()
        self.config = config
        f, h = config.num_features, config.hidden
        self.encode = nn.Sequential(nn.Linear(f, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.mix = nn.Linear(2 * h, h)
        self.out = nn.Linear(h, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: RankInputs) -> Tensor:
        """``[M]`` relevance of each item (the layers applied as functions of their weights: the same operations
        as calling them, without the module calls' overhead when one short list is ranked at a time)."""
        first, second = self.encode._modules["0"], self.encode._modules["2"]
        h = F.relu(F.linear(F.relu(F.linear(x.features, first.weight, first.bias)), second.weight, second.bias))
        m = torch.zeros_like(h)
        if x.src.numel():
            m = m.scatter_reduce(0, x.dst[:, None].expand(-1, h.shape[1]), h[x.src], "amax", include_self=False)
        mixed = torch.relu(F.linear(torch.cat([h, m], dim=1), self.mix.weight, self.mix.bias))
        column, sign = RESIDUALS[self.config.residual]
        return sign * x.features[:, column] + F.linear(mixed, self.out.weight, self.out.bias).squeeze(1)

    def checkpoint(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "state_dict": {k: v.detach().cpu() for k, v in self.state_dict().items()},
        }

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> RankHead:
        head = cls(RankHeadConfig(**state["config"]))
        head.load_state_dict(state["state_dict"])
        return head


def listwise_loss(scores: Tensor, query: Tensor, gold: Tensor) -> Tensor:
    """ListNet's top-one cross entropy, averaged over the queries whose list holds a gold item:

        L = mean_b  −(1 / |G_b|) Σ_{v ∈ G_b} log softmax_{u ∈ list_b}(r_u)_v

    ``query`` (``[M]``, non-decreasing) groups the items, ``gold`` (``[M]`` bool) marks gold items.
    """
    b = int(query.max()) + 1 if query.numel() else 0
    if b == 0:
        return scores.sum() * 0.0
    top = torch.full((b,), float("-inf"), device=scores.device).scatter_reduce(0, query, scores, "amax")
    shifted = scores - top[query].detach()
    log_z = torch.zeros(b, device=scores.device).index_add(0, query, shifted.exp()).log() + top.detach()
    log_p = scores - log_z[query]
    n_gold = torch.zeros(b, device=scores.device).index_add(0, query, gold.float())
    per_query = torch.zeros(b, device=scores.device).index_add(0, query, torch.where(gold, log_p, 0.0))
    has = n_gold > 0
    if not bool(has.any()):
        return scores.sum() * 0.0
    return -(per_query[has] / n_gold[has]).mean()
