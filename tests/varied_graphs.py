"""Synthetic graphs with varied Beta evidence counts, shared by the policy tests."""

import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core.graph import MemoryGraph


def varied_posterior_graph(nodes: int = 400, seed: int = 3, avg_degree: float = 6, dim: int = 16) -> MemoryGraph:
    """``make_synthetic_graph`` with ``S, F`` drawn from ``{0, 1, 2}``, so posterior means differ per edge."""
    g = make_synthetic_graph(nodes, avg_degree=avg_degree, dim=dim, seed=seed)
    gen = torch.Generator().manual_seed(0)
    g.S = torch.randint(0, 3, (g.num_edges,), generator=gen).float()
    g.F = torch.randint(0, 3, (g.num_edges,), generator=gen).float()
    return g
