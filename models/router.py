"""QueryRouter: query-conditioned traversal scores over candidate edges (HAGE §3).

For a query embedding ``q``, its relation intent ``π(q) ∈ Δ^R`` and a candidate edge ``i -> j``
with features ``e_ij ∈ R^4``, relation type ``τ_ij`` and target embedding ``x_j``:

    m(q)  = R · π(q) + g([q̂ ; π(q)])                  modulation, g: 2-layer MLP, last layer zero-init
    w_ij  = h([m(q) ⊙ e_ij ; r_{τ_ij}])               structural weight, h: MLP (or linear), r: relation embedding
    s_ij  = cos(q, x_j) + w_ij                        traversal score (additive)

At initialisation with uniform intent ``m(q) = 1``. Because ``w_ij`` is added to (not multiplied
with) the cosine, an edge into a bridge node with negative cosine can outscore a semantically
closer neighbour. In ``mode="fixed"`` nothing is learned: ``m(q) = 1`` and ``w_ij = Σ_r e_ij,r``
(the edge-only ablation, where only ``e_ij`` moves).

Shapes: ``forward`` scores ``B`` queries against either ``E`` shared edges (dense, ``[B, E]``)
or ``C`` candidate edges each tied to a query row by ``index`` (ragged, ``[C]``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

ROUTER_MODES = ("learned", "fixed")


class QueryRouter(nn.Module):
    """See module docstring for the formulas.

    Args:
        dim: query/node embedding size ``D``.
        num_relations: ``R``, also the edge-feature size (default: 4).
        hidden: hidden width of ``g`` and ``h`` (default: 64).
        relation_dim: size of the relation embedding ``r`` (0 disables it) (default: 4).
        head: ``"mlp"`` or ``"linear"`` for ``h`` (default: ``"mlp"``).
        mode: ``"learned"`` or ``"fixed"`` (default: ``"learned"``).
    """

    def __init__(self, dim: int, num_relations: int = 4, hidden: int = 64, relation_dim: int = 4,
                 head: str = "mlp", mode: str = "learned"):
        super().__init__()
        if mode not in ROUTER_MODES:
            raise ValueError(f"router mode {mode!r} is not one of {ROUTER_MODES}")
        if head not in ("mlp", "linear"):
            raise ValueError(f"router head {head!r} is not 'mlp' or 'linear'")
        self.dim, self.num_relations, self.mode = dim, num_relations, mode
        self._config = {"dim": dim, "num_relations": num_relations, "hidden": hidden, "relation_dim": relation_dim,
                        "head": head, "mode": mode}
        self.relation_dim = relation_dim if mode == "learned" else 0
        if mode == "fixed":
            return
        self.modulator = nn.Sequential(nn.Linear(dim + num_relations, hidden), nn.ReLU(), nn.Linear(hidden, num_relations))
        nn.init.zeros_(self.modulator[2].weight)
        nn.init.zeros_(self.modulator[2].bias)
        if relation_dim:
            self.relation = nn.Embedding(num_relations, relation_dim)
        width = num_relations + relation_dim
        self.head = (nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1)) if head == "mlp"
                     else nn.Linear(width, 1))

    def modulation(self, q: Tensor, intent: Tensor) -> Tensor:
        """``m(q)``: ``[B, R]``."""
        if self.mode == "fixed":
            return q.new_ones(q.shape[0], self.num_relations)
        qn = nn.functional.normalize(q, dim=-1)
        return self.num_relations * intent + self.modulator(torch.cat([qn, intent], -1))

    def structural_weight(self, m: Tensor, e: Tensor, edge_type: Tensor) -> Tensor:
        """``w_ij`` for modulations ``m`` and features ``e`` of matching leading shape ``[..., R]``."""
        if self.mode == "fixed":
            return (m * e).sum(-1)
        z = m * e
        if self.relation_dim:
            rel = self.relation(edge_type.clamp(max=self.num_relations - 1))
            z = torch.cat([z, rel.expand(*z.shape[:-1], rel.shape[-1])], -1)
        return self.head(z).squeeze(-1)

    def forward(self, q: Tensor, intent: Tensor, x_target: Tensor, e: Tensor, edge_type: Tensor,
                index: Tensor | None = None) -> Tensor:
        """Traversal scores ``s_ij``.

        Args:
            q: ``[B, D]`` query embeddings.
            intent: ``[B, R]`` intent weights π(q).
            x_target: ``[C, D]`` target-node embeddings of the candidate edges.
            e: ``[C, R]`` edge features.
            edge_type: ``[C]`` relation ids.
            index: ``[C]`` query row of each candidate; ``None`` scores every query against every
                edge (default: ``None``).

        Returns:
            ``[C]`` scores when ``index`` is given, else ``[B, C]``.
        """
        m = self.modulation(q, intent)
        if index is None:
            qn = nn.functional.normalize(q, dim=-1)
            cos = qn @ nn.functional.normalize(x_target, dim=-1).T
            return cos + self.structural_weight(m[:, None, :], e[None, :, :], edge_type[None, :])
        return self.score(q, m, x_target, e, edge_type, index)

    def score(self, q: Tensor, m: Tensor, x_target: Tensor | None, e: Tensor, edge_type: Tensor, index: Tensor,
              cos: Tensor | None = None) -> Tensor:
        """Ragged ``s_ij`` ``[C]`` given precomputed modulations ``m = modulation(q, π(q))`` ``[B, R]``.

        ``cos`` ``[C]`` may be given precomputed (then ``x_target`` is unused).
        """
        if cos is None:
            cos = (nn.functional.normalize(q, dim=-1)[index] * nn.functional.normalize(x_target, dim=-1)).sum(-1)
        return cos + self.structural_weight(m[index], e, edge_type)

    def config(self) -> dict:
        """Constructor arguments, stored in checkpoints to rebuild and check the architecture."""
        return dict(self._config)
