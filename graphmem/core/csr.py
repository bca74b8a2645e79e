"""Rows of a CSR layout read for many nodes at once (shared by the policies and the models)."""

from __future__ import annotations

import torch
from torch import Tensor


def csr_positions(rowptr: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """The concatenated CSR rows of ``nodes`` ``[K]``: ``(seg [C], pos [C])``, ``seg`` indexing
    ``nodes`` and ``pos`` the positions ``rowptr[v] .. rowptr[v+1]-1`` of each row, in order."""
    start = rowptr.index_select(0, nodes)
    deg = rowptr.index_select(0, nodes + 1) - start
    seg = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), deg)
    offset = start - (torch.cumsum(deg, 0) - deg)  # position of a row's first entry minus its place in the output
    return seg, torch.arange(seg.numel(), device=nodes.device) + offset.index_select(0, seg)


def insert_rows(old: Tensor, at: Tensor, new: Tensor) -> Tensor:
    """``old`` with the rows ``new[j]`` put before its row ``at[j]`` (``at`` ascending; ``len(old)``: at the end):
    row ``j`` of ``new`` lands at ``at[j] + j``. The runs of ``old`` between two insertion points are copied whole,
    so growing a sorted layout by a few rows costs one copy of it."""
    k = at.numel()
    out = torch.empty((old.shape[0] + k, *old.shape[1:]), dtype=old.dtype, device=old.device)
    lo = 0
    for j, hi in enumerate([*at.tolist(), old.shape[0]]):
        out[lo + j : hi + j] = old[lo:hi]
        if j < k:
            out[hi + j] = new[j]
        lo = hi
    return out


def insertion_points(
    rowptr: Tensor, column: Tensor, rows: Tensor, values: Tensor, ties_after: bool, perm: Tensor | None = None
) -> Tensor:
    """Where each entry ``(rows[j], values[j])`` goes in a CSR layout whose row ``r`` holds ``column[rowptr[r]:
    rowptr[r + 1]]`` (with ``perm``: ``column[perm[rowptr[r]:rowptr[r + 1]]]``) in ascending order (rows at or past
    the layout's end go at its end): the first position holding a larger value (``ties_after``) or a value not
    smaller (else)."""
    n, at = rowptr.numel() - 1, torch.full((rows.numel(),), int(rowptr[-1]), dtype=torch.long)
    for j, (r, v) in enumerate(zip(rows.tolist(), values.tolist())):
        if r < n:
            lo, hi = int(rowptr[r]), int(rowptr[r + 1])
            held = column[lo:hi] if perm is None else column[perm[lo:hi]]
            at[j] = lo + int(torch.searchsorted(held, v, right=ties_after))
    return at


def grown_rowptr(rowptr: Tensor, rows: Tensor, n: int) -> Tensor:
    """``[n + 1]`` the ``rowptr`` of a CSR layout after entries in ``rows`` were added to the one of ``rowptr``
    (``len(rowptr) - 1 <= n`` rows; rows past them start empty)."""
    n0, out = rowptr.numel() - 1, torch.zeros(n + 1, dtype=torch.long)
    out[1:] = torch.cumsum(torch.bincount(rows, minlength=n), 0)
    out[1 : n0 + 1] += rowptr[1:]
    out[n0 + 1 :] += rowptr[-1]
    return out
