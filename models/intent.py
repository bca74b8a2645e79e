"""Relation intent of a query: weights π(q) over (temporal, semantic, causal, entity).

Four interchangeable sources, chosen by ``kind``:

* ``prototype`` — one trainable prototype ``p_r`` per relation; with ``q̂``, ``p̂_r`` unit vectors

      π(q) = softmax_r( cos(q, p_r) / τ )

  Prototypes start from given vectors (e.g. embedded relation descriptions) or a seeded random
  draw; the optional anchor ``||P - P0||^2`` keeps them near their starting meaning.
* ``head`` — a linear classifier on the embedding, ``π(q) = softmax(W q̂ + b)``, zero-initialised
  (uniform at start) and trained jointly with the router.
* ``uniform`` — ``π(q) = 1/R`` (no intent signal).
* ``external`` — weights supplied per query by an :class:`IntentProvider` (for example an LLM
  classifier with an on-disk cache); the module only validates and normalises them.

The intent is computed from the query alone — never from a gold category.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn

INTENT_KINDS = ("prototype", "head", "uniform", "external")


@runtime_checkable
class IntentProvider(Protocol):
    """Anything that maps query texts to ``[B, R]`` non-negative relation weights (rows sum to 1)."""

    def __call__(self, texts: Sequence[str]) -> Tensor: ...


class RelationIntent(nn.Module):
    """Relation-intent weights π(q) (see module docstring).

    Args:
        dim: query embedding size ``D``.
        kind: one of ``prototype``, ``head``, ``uniform``, ``external`` (default: ``"prototype"``).
        num_relations: ``R`` (default: 4).
        temperature: ``τ`` of the prototype softmax (default: 0.1).
        prototypes: optional ``[R, D]`` starting prototypes (default: seeded random normal).
    """

    def __init__(
        self,
        dim: int,
        kind: str = "prototype",
        num_relations: int = 4,
        temperature: float = 0.1,
        prototypes: Tensor | None = None,
    ):
        super().__init__()
        if kind not in INTENT_KINDS:
            raise ValueError(f"intent kind {kind!r} is not one of {INTENT_KINDS}")
        self.kind, self.num_relations, self.temperature = kind, num_relations, float(temperature)
        self._config = {"dim": dim, "kind": kind, "num_relations": num_relations, "temperature": float(temperature)}
        if kind == "prototype":
            if prototypes is None:
                prototypes = torch.randn(num_relations, dim)
            prototypes = torch.as_tensor(prototypes, dtype=torch.float32)
            if prototypes.shape != (num_relations, dim):
                raise ValueError(f"prototypes must be [{num_relations}, {dim}], got {tuple(prototypes.shape)}")
            self.prototypes = nn.Parameter(prototypes.clone())
            self.register_buffer("prototypes_init", prototypes.clone())
        elif kind == "head":
            self.head = nn.Linear(dim, num_relations)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def forward(self, q: Tensor, external: Tensor | None = None) -> Tensor:
        """``[B, R]`` intent weights for query embeddings ``q`` ``[B, D]``.

        ``external`` (``[B, R]``) is required for ``kind="external"`` and refused otherwise.
        """
        if self.kind == "external":
            if external is None:
                raise ValueError("intent kind 'external' needs weights from an IntentProvider")
            w = torch.as_tensor(external, dtype=q.dtype, device=q.device)
            if w.shape != (q.shape[0], self.num_relations) or (w < 0).any() or not torch.isfinite(w).all():
                raise ValueError(
                    f"external intent must be [{q.shape[0]}, {self.num_relations}] finite non-negative weights"
                )
            return w / w.sum(-1, keepdim=True).clamp_min(1e-12)
        if external is not None:
            raise ValueError(f"intent kind {self.kind!r} does not take external weights")
        if self.kind == "uniform":
            return q.new_full((q.shape[0], self.num_relations), 1.0 / self.num_relations)
        qn = nn.functional.normalize(q, dim=-1)
        if self.kind == "head":
            return torch.softmax(self.head(qn), -1)
        p = nn.functional.normalize(self.prototypes, dim=-1)
        return torch.softmax(qn @ p.T / self.temperature, -1)

    def anchor_loss(self) -> Tensor:
        """``||P - P0||^2`` for prototypes; zero for the other kinds."""
        if self.kind != "prototype":
            return torch.zeros(())
        return (self.prototypes - self.prototypes_init).pow(2).sum()

    def config(self) -> dict:
        """Constructor arguments (prototype values live in the state dict)."""
        return dict(self._config)
