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
