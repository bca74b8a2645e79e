"""Nearest earlier rows of a growing set of unit vectors: the live memory's semantic-neighbour search.

Rows are added in order and never move (a deletion rebuilds the index), so a row is its FAISS id in an
``IndexHNSWFlat`` (inner product on unit vectors = cosine). :meth:`RowIndex.search` asks FAISS for
``k + overfetch`` candidates, re-scores them exactly from the embeddings and orders them by (cosine desc,
row asc), the order of the exact search; adding one row costs ``O(log N)``, not ``O(N)``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from graphmem.index.vector_index import IndexSpec, _faiss


class RowIndex:
    """HNSW over rows ``0..n-1`` (module docstring).

    Args:
        dim: the vectors' width.
        spec: HNSW links, construction and search widths, overfetch (:class:`IndexSpec`; default: its defaults).
    """

    def __init__(self, dim: int, spec: IndexSpec | None = None) -> None:
        self.spec = spec or IndexSpec()
        faiss = _faiss()
        self.index = faiss.IndexHNSWFlat(dim, self.spec.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = self.spec.ef_construction
        self.index.hnsw.efSearch = self.spec.ef_search

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def add(self, rows: Tensor) -> None:
        """Append ``[k, dim]`` vectors as the next ``k`` rows."""
        self.index.add(np.ascontiguousarray(rows.detach().cpu().numpy(), dtype=np.float32))

    def search(self, x: Tensor, k: int, embeddings: Tensor) -> tuple[list[int], list[float]]:
        """At most ``k`` rows nearest ``x``, with their exact cosines from ``embeddings``, by (cosine desc, row asc)."""
        if len(self) == 0 or k < 1:
            return [], []
        want = min(k + self.spec.overfetch, len(self))
        _, ids = self.index.search(np.ascontiguousarray(x.detach().cpu().numpy()[None, :], dtype=np.float32), want)
        rows = torch.from_numpy(ids[0][ids[0] >= 0].astype(np.int64))
        cos = (embeddings[rows].double() @ x.double()).float()  # as the exact search computes them
        pairs = sorted(zip((-cos).tolist(), rows.tolist()))[:k]
        return [r for _, r in pairs], [-c for c, _ in pairs]
