"""Trainable per-edge relation features ``e_ij`` in R^4 (HAGE §3), for one or many graphs.

Every edge of every graph gets a row of one parameter matrix ``E`` (graphs stacked in a fixed
order, edges in each graph's own order), initialised from the graph's Phase-1 scores
``graph.edge_attr`` or from the one-hot of its relation type. A buffer keeps the anchor value
``E0`` (``graph.edge_attr_init`` or the same one-hot) for the regulariser

    L_anchor = ||E - E0||_2^2          (weighted by λ_anchor in the trainer)

which keeps learned features near their Phase-1 meaning. ``trainable=False`` freezes ``E``.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor, nn

from graphmem.graph import EDGE_FEATURE_DIM, MemoryGraph

EDGE_INITS = ("phase1", "onehot")


def onehot_features(graph: MemoryGraph) -> Tensor:
    """``[E, 4]`` one-hot of each edge's relation type (relations past the 4th share the last column)."""
    return nn.functional.one_hot(graph.edge_type.clamp(max=EDGE_FEATURE_DIM - 1), EDGE_FEATURE_DIM).float()


class EdgeFeatures(nn.Module):
    """Edge features of a set of named graphs.

    Args:
        graphs: graphs by name; their order fixes the row order of :attr:`weight`.
        init: ``"phase1"`` (start from ``edge_attr``, anchor to ``edge_attr_init``) or ``"onehot"``
            (start and anchor at the relation one-hot, the static-edge ablation) (default: ``"phase1"``).
        trainable: whether ``weight`` receives gradients (default: ``True``).
    """

    def __init__(self, graphs: Mapping[str, MemoryGraph], init: str = "phase1", trainable: bool = True):
        super().__init__()
        if init not in EDGE_INITS:
            raise ValueError(f"EdgeFeatures init {init!r} is not one of {EDGE_INITS}")
        self.names: list[str] = list(graphs)
        self.init = init
        counts = [graphs[n].num_edges for n in self.names]
        offsets = torch.zeros(len(counts) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(torch.tensor(counts, dtype=torch.long), 0)
        if init == "phase1":
            start = [graphs[n].edge_attr.float() for n in self.names]
            anchor = [graphs[n].edge_attr_init.float() for n in self.names]
        else:
            start = anchor = [onehot_features(graphs[n]) for n in self.names]
        empty = torch.empty(0, EDGE_FEATURE_DIM)
        self.weight = nn.Parameter(torch.cat(start) if start else empty, requires_grad=trainable)
        self.register_buffer("initial", (torch.cat(anchor) if anchor else empty).clone())
        self.register_buffer("offsets", offsets)
        self._row = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def from_state(cls, names: list[str], state: Mapping[str, Tensor], init: str = "phase1") -> EdgeFeatures:
        """Rebuild (frozen) from a :meth:`state_dict` and its graph names, without the graphs."""
        obj = cls({}, init=init, trainable=False)
        if state["offsets"].numel() != len(names) + 1:
            raise ValueError(f"edge-feature state has {state['offsets'].numel() - 1} graphs but {len(names)} names")
        obj.names, obj._row = list(names), {n: i for i, n in enumerate(names)}
        obj.weight = nn.Parameter(state["weight"].detach().clone(), requires_grad=False)
        obj.initial, obj.offsets = state["initial"].clone(), state["offsets"].clone()
        return obj

    @property
    def trainable(self) -> bool:
        return self.weight.requires_grad

    def freeze(self) -> EdgeFeatures:
        self.weight.requires_grad_(False)
        return self

    def __contains__(self, name: str) -> bool:
        return name in self._row

    def span(self, name: str) -> tuple[int, int]:
        """``(first, end)`` rows of graph ``name`` in :attr:`weight`."""
        if name not in self._row:
            raise KeyError(f"EdgeFeatures has no graph {name!r}; it holds {len(self.names)} graphs")
        i = self._row[name]
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def of(self, name: str) -> Tensor:
        """``[E_g, 4]`` features of graph ``name`` (a view: gradients flow into :attr:`weight`)."""
        a, b = self.span(name)
        return self.weight[a:b]

    def forward(self, edge_ids: Tensor | None = None) -> Tensor:
        """Rows of :attr:`weight` for global edge ids (all rows when ``None``)."""
        return self.weight if edge_ids is None else self.weight[edge_ids]

    def anchor_loss(self) -> Tensor:
        """``||E - E0||^2`` summed over all edges and dimensions."""
        return (self.weight - self.initial).pow(2).sum()

    def write_back(self, graphs: Mapping[str, MemoryGraph]) -> dict[str, MemoryGraph]:
        """Copies of ``graphs`` whose ``edge_attr`` holds the learned features (others untouched)."""
        out = {}
        for name, graph in graphs.items():
            graph = graph.copy()
            if name in self._row:
                feats = self.of(name).detach().cpu().float()
                if feats.shape[0] != graph.num_edges:
                    raise ValueError(
                        f"EdgeFeatures for graph {name!r} has {feats.shape[0]} edges, the graph has {graph.num_edges}"
                    )
                graph.edge_attr = feats.clone()
            out[name] = graph
        return out
