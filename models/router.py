"""QueryRouter: query-conditioned traversal scores over candidate edges (HAGE §3).

For a query embedding ``q``, its relation intent ``π(q) ∈ Δ^R`` and a candidate edge ``i -> j``
with features ``e_ij ∈ R^4``, relation type ``τ_ij`` and target embedding ``x_j``:

    m(q)  = R · π(q) + g([q̂ ; π(q)])                  modulation, g: 2-layer MLP, last layer zero-init
    σ_ij  = [cos(q, x_i), cos(q, x_j), cos(x_i, x_j)]  semantic similarities of the edge
    w_ij  = h([m(q) ⊙ e_ij ; r_{τ_ij} ; σ_ij])        structural weight, h: MLP (or linear), r: relation embedding
    s_ij  = cos(q, x_j) + w_ij                        traversal score (additive)

The similarities ``σ_ij`` (HAGE: the router combines edge features, intent and semantic
similarities into the structural weight) let ``w`` depend on how relevant the source of an edge
is and how far the edge moves in embedding space; ``similarities=False`` drops them.

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
NUM_SIMILARITIES = 3


def edge_similarities(
    q_unit: Tensor, x_source_unit: Tensor, x_target_unit: Tensor, cos_target: Tensor | None = None
) -> Tensor:
    """``σ_ij = [cos(q, x_i), cos(q, x_j), cos(x_i, x_j)]`` ``[C, 3]`` from unit-norm rows ``[C, D]``."""
    if cos_target is None:
        cos_target = (q_unit * x_target_unit).sum(-1)
    return torch.stack([(q_unit * x_source_unit).sum(-1), cos_target, (x_source_unit * x_target_unit).sum(-1)], -1)


class QueryRouter(nn.Module):
    """See module docstring for the formulas.

    Args:
        dim: query/node embedding size ``D``.
        num_relations: ``R``, also the edge-feature size (default: 4).
        hidden: hidden width of ``g`` and ``h`` (default: 64).
        relation_dim: size of the relation embedding ``r`` (0 disables it) (default: 4).
        head: ``"mlp"`` or ``"linear"`` for ``h`` (default: ``"mlp"``).
        mode: ``"learned"`` or ``"fixed"`` (default: ``"learned"``).
        similarities: feed ``σ_ij`` to ``h`` (default: ``True``).
    """

    def __init__(
        self,
        dim: int,
        num_relations: int = 4,
        hidden: int = 64,
        relation_dim: int = 4,
        head: str = "mlp",
        mode: str = "learned",
        similarities: bool = True,
    ):
        super().__init__()
        if mode not in ROUTER_MODES:
            raise ValueError(f"router mode {mode!r} is not one of {ROUTER_MODES}")
        if head not in ("mlp", "linear"):
            raise ValueError(f"router head {head!r} is not 'mlp' or 'linear'")
        self.dim, self.num_relations, self.mode = dim, num_relations, mode
        self._config = {
            "dim": dim,
            "num_relations": num_relations,
            "hidden": hidden,
            "relation_dim": relation_dim,
            "head": head,
            "mode": mode,
            "similarities": similarities,
        }
        self.relation_dim = relation_dim if mode == "learned" else 0
        self.similarities = similarities and mode == "learned"
        if mode == "fixed":
            return
        self.modulator = nn.Sequential(
            nn.Linear(dim + num_relations, hidden), nn.ReLU(), nn.Linear(hidden, num_relations)
        )
        nn.init.zeros_(self.modulator[2].weight)
        nn.init.zeros_(self.modulator[2].bias)
        if relation_dim:
            self.relation = nn.Embedding(num_relations, relation_dim)
        width = num_relations + relation_dim + (NUM_SIMILARITIES if self.similarities else 0)
        self.head = (
            nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            if head == "mlp"
            else nn.Linear(width, 1)
        )

    def modulation(self, q: Tensor, intent: Tensor) -> Tensor:
        """``m(q)``: ``[B, R]``."""
        if self.mode == "fixed":
            return q.new_ones(q.shape[0], self.num_relations)
        qn = nn.functional.normalize(q, dim=-1)
        return self.num_relations * intent + self.modulator(torch.cat([qn, intent], -1))

    def structural_weight(self, m: Tensor, e: Tensor, edge_type: Tensor, sims: Tensor | None = None) -> Tensor:
        """``w_ij`` for modulations ``m``, features ``e`` and similarities ``sims`` of matching leading shape."""
        if self.mode == "fixed":
            return (m * e).sum(-1)
        z = m * e
        if self.relation_dim:
            rel = self.relation(edge_type.clamp(max=self.num_relations - 1))
            z = torch.cat([z, rel.expand(*z.shape[:-1], rel.shape[-1])], -1)
        if self.similarities:
            if sims is None:
                raise ValueError("this router uses edge similarities: pass x_source / sims")
            z = torch.cat([z, sims.expand(*z.shape[:-1], NUM_SIMILARITIES)], -1)
        return self.head(z).squeeze(-1)

    def forward(
        self,
        q: Tensor,
        intent: Tensor,
        x_target: Tensor,
        e: Tensor,
        edge_type: Tensor,
        index: Tensor | None = None,
        x_source: Tensor | None = None,
    ) -> Tensor:
        """Traversal scores ``s_ij``.

        Args:
            q: ``[B, D]`` query embeddings.
            intent: ``[B, R]`` intent weights π(q).
            x_target: ``[C, D]`` target-node embeddings of the candidate edges.
            e: ``[C, R]`` edge features.
            edge_type: ``[C]`` relation ids.
            index: ``[C]`` query row of each candidate; ``None`` scores every query against every
                edge (default: ``None``).
            x_source: ``[C, D]`` source-node embeddings, needed when ``similarities`` is on
                (default: ``None``).

        Returns:
            ``[C]`` scores when ``index`` is given, else ``[B, C]``.
        """
        m = self.modulation(q, intent)
        qn, xt = nn.functional.normalize(q, dim=-1), nn.functional.normalize(x_target, dim=-1)
        xs = None if x_source is None else nn.functional.normalize(x_source, dim=-1)
        if index is None:
            cos = qn @ xt.T
            sims = None if xs is None else torch.stack([qn @ xs.T, cos, ((xs * xt).sum(-1))[None].expand_as(cos)], -1)
            return cos + self.structural_weight(m[:, None, :], e[None, :, :], edge_type[None, :], sims)
        cos = (qn[index] * xt).sum(-1)
        sims = None if xs is None else edge_similarities(qn[index], xs, xt, cos)
        return self.score(m, e, edge_type, index, cos, sims)

    def score(
        self, m: Tensor, e: Tensor, edge_type: Tensor, index: Tensor, cos: Tensor, sims: Tensor | None = None
    ) -> Tensor:
        """Ragged ``s_ij = cos_ij + w_ij`` ``[C]`` from precomputed parts.

        Args:
            m: ``[B, R]`` modulations ``modulation(q, π(q))``; ``index`` ``[C]`` picks each candidate's row.
            cos: ``[C]`` ``cos(q, x_j)``; ``sims``: ``[C, 3]`` :func:`edge_similarities` (when used).
        """
        return cos + self.structural_weight(m[index], e, edge_type, sims)

    def config(self) -> dict:
        """Constructor arguments, stored in checkpoints to rebuild and check the architecture."""
        return dict(self._config)
