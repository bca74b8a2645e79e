"""Nearest earlier rows of a growing set of unit vectors: the live memory's semantic-neighbour search.

Rows are added in order, so a row is first the FAISS id it was added as, in an ``IndexHNSWFlat`` (inner product
on unit vectors = cosine). A deletion renumbers the rows after it: the index keeps a map from FAISS id to the
current row (``-1``: deleted) instead of rebuilding, a revised row's vector takes a new slot, and the caller
rebuilds the index once deleted slots are too many.
:meth:`RowIndex.search` asks FAISS for ``k + overfetch`` live candidates (more while deleted ones crowd them
out), re-scores them exactly from the embeddings and orders them by (cosine desc, row asc), the order of the
exact search; adding one row costs ``O(log N)``, not ``O(N)``.
"""

from __future__ import annotations

from typing import Sequence

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
        self._row_of = np.empty(64, dtype=np.int64)  # FAISS id -> current row, -1 once deleted (capacity doubling)
        self.rows = 0

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The serialised FAISS index and the id -> row map (what :meth:`from_arrays` reads back)."""
        return {"faiss": _faiss().serialize_index(self.index), "row_of": self.row_of.copy()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], spec: IndexSpec | None = None) -> RowIndex:
        """The index :meth:`to_arrays` saved (its search width set from ``spec``)."""
        out = cls.__new__(cls)
        out.spec = spec or IndexSpec()
        out.index = _faiss().deserialize_index(np.ascontiguousarray(arrays["faiss"], dtype=np.uint8))
        out.index.hnsw.efSearch = out.spec.ef_search
        out._row_of = np.array(arrays["row_of"], dtype=np.int64)
        out.rows = int((out._row_of >= 0).sum())
        if out._row_of.size != out.index.ntotal:
            raise ValueError(f"{out._row_of.size} rows mapped for {out.index.ntotal} vectors")
        return out

    @property
    def row_of(self) -> np.ndarray:
        """``[slots]`` the current row of each FAISS id (``-1``: deleted), a view."""
        return self._row_of[: self.slots]

    def _append(self, rows: np.ndarray) -> None:
        """Map the FAISS ids just added (the last ``len(rows)``) to ``rows``; O(1) amortised per id."""
        start = self.slots - rows.size
        if self._row_of.size < self.slots:
            grown = np.empty(max(self.slots, 2 * self._row_of.size), dtype=np.int64)
            grown[:start] = self._row_of[:start]
            self._row_of = grown
        self._row_of[start : self.slots] = rows

    def __len__(self) -> int:
        """The live rows."""
        return self.rows

    @property
    def slots(self) -> int:
        """Every vector the index holds, deleted ones included."""
        return int(self.index.ntotal)

    @property
    def dead(self) -> int:
        return self.slots - self.rows

    def add(self, rows: Tensor) -> None:
        """Append ``[k, dim]`` vectors as the next ``k`` rows."""
        k = int(rows.shape[0])
        self.index.add(np.ascontiguousarray(rows.detach().cpu().numpy(), dtype=np.float32))
        self._append(np.arange(self.rows, self.rows + k, dtype=np.int64))
        self.rows += k

    def remove(self, rows: Sequence[int]) -> None:
        """Delete ``rows`` (current numbering); the rows after each move down by the deleted ones before them."""
        drop = np.zeros(self.rows, dtype=bool)
        drop[np.asarray(rows, dtype=np.int64)] = True
        moved = np.arange(self.rows) - np.cumsum(drop)
        moved[drop] = -1
        row_of = self.row_of
        live = row_of >= 0
        row_of[live] = moved[row_of[live]]
        self.rows -= int(drop.sum())

    def replace(self, row: int, x: Tensor) -> None:
        """Give ``row`` the vector ``x`` (``[dim]``): its old slot is deleted and a new one maps to the row."""
        live = self.row_of
        live[live == row] = -1
        self.index.add(np.ascontiguousarray(x.detach().cpu().numpy()[None, :], dtype=np.float32))
        self._append(np.asarray([row], dtype=np.int64))

    def crowded(self) -> bool:
        """Whether deleted slots exceed ``spec.rebuild_fraction`` of all slots (time to rebuild)."""
        return self.dead > self.spec.rebuild_fraction * self.slots

    def search(self, x: Tensor, k: int, embeddings: Tensor) -> tuple[list[int], list[float]]:
        """At most ``k`` rows nearest ``x``, with their exact cosines from ``embeddings``, by (cosine desc, row asc)."""
        if self.rows == 0 or k < 1:
            return [], []
        enough = min(k + self.spec.overfetch, self.rows)
        want = enough if self.dead == 0 else min(2 * enough, self.slots)
        query = np.ascontiguousarray(x.detach().cpu().numpy()[None, :], dtype=np.float32)
        while True:
            _, ids = self.index.search(query, want)
            found = self.row_of[ids[0][ids[0] >= 0]]
            found = found[found >= 0]
            if found.size >= enough or want >= self.slots:
                break
            want = min(2 * want, self.slots)  # deleted rows crowded the live ones out: ask for more
        rows = torch.from_numpy(found)
        cos = (embeddings[rows].double() @ x.double()).float()  # as the exact search computes them
        pairs = sorted(zip((-cos).tolist(), rows.tolist()))[:k]
        return [r for _, r in pairs], [-c for c, _ in pairs]
