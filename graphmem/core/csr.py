"""Rows of a CSR layout read for many nodes at once (shared by the policies and the models)."""

from __future__ import annotations

import ctypes
import math
import sys

import numpy as np
import torch
from torch import Tensor

ROOM = 0.125
"""spare rows a layout grown by :func:`grow_rows` keeps after its own, as a share of them"""


def csr_positions(rowptr: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """The concatenated CSR rows of ``nodes`` ``[K]``: ``(seg [C], pos [C])``, ``seg`` indexing
    ``nodes`` and ``pos`` the positions ``rowptr[v] .. rowptr[v+1]-1`` of each row, in order."""
    start = rowptr.index_select(0, nodes)
    deg = rowptr.index_select(0, nodes + 1) - start
    seg = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), deg)
    offset = start - (torch.cumsum(deg, 0) - deg)  # position of a row's first entry minus its place in the output
    return seg, torch.arange(seg.numel(), device=nodes.device) + offset.index_select(0, seg)


def insert_rows(old: Tensor, at: Tensor, new: Tensor, room: float = 0.0) -> Tensor:
    """``old`` with the rows ``new[j]`` put before its row ``at[j]`` (``at`` ascending; ``len(old)``: at the end):
    row ``j`` of ``new`` lands at ``at[j] + j``. The runs of ``old`` between two insertion points are copied whole,
    so growing a sorted layout by a few rows costs one copy of it. With ``room``, the result is the first rows of
    a buffer with ``room`` times as many rows again after them (not written, so not yet resident)."""
    k = at.numel()
    out = empty_with_room(old.shape[0] + k, *old.shape[1:], dtype=old.dtype, device=old.device, room=room)
    lo = 0
    for j, hi in enumerate([*at.tolist(), old.shape[0]]):
        out[lo + j : hi + j] = old[lo:hi]
        if j < k:
            out[hi + j] = new[j]
        lo = hi
    return out


def grow_rows(held: dict[str, Tensor], name: str, at: Tensor, new: Tensor) -> Tensor:
    """:func:`insert_rows` of ``held[name]``, which is taken out of ``held``: the rows are moved within its own
    buffer when nothing else holds it (no other reference to the tensor, no other tensor or array on its buffer)
    and the buffer has room for them; else copied into a new buffer with :data:`ROOM` spare rows.

    In place, the runs of rows between two insertion points move towards the end by the new rows before them, the
    last run first (one overlapping move each), and the new rows fill the gaps: the rows after the first insertion
    point are moved within memory already touched, with no second copy of the layout alive. A layout someone still
    reads is never changed under them: it is copied."""
    old, probe = held.pop(name), torch.empty(1, dtype=new.dtype, device=new.device)
    n, k = old.shape[0], at.numel()
    width = math.prod(old.shape[1:]) * old.element_size()
    fits = (
        n > 0
        and old.device.type == "cpu"
        and old.dtype == new.dtype
        and not (old.requires_grad or old.is_inference() or torch.is_inference_mode_enabled())
        and old.is_contiguous()
        and old.storage_offset() == 0
        and old.untyped_storage().nbytes() >= (n + k) * width
    )
    if not (fits and _holders(old) == _holders(probe)):  # probe: a tensor held by one local name only
        return insert_rows(old, at, new, room=ROOM)
    out = _first_rows(old, n + k)
    del old
    base, bounds = out.data_ptr(), [*at.tolist(), n]
    for j in range(k - 1, -1, -1):
        lo, hi = bounds[j], bounds[j + 1]
        if hi > lo:
            ctypes.memmove(base + (lo + j + 1) * width, base + lo * width, (hi - lo) * width)
    out[at + torch.arange(k, device=at.device)] = new
    return out


def append_rows(held: dict[str, Tensor], name: str, new: Tensor) -> Tensor:
    """:func:`grow_rows` of ``held[name]`` with ``new`` after its last row (taken out of ``held`` likewise)."""
    end = held[name].shape[0]
    return grow_rows(held, name, torch.full((new.shape[0],), end, dtype=torch.long, device=new.device), new)


def empty_with_room(
    *shape: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None, room: float = ROOM
) -> Tensor:
    """An empty tensor of ``shape`` on a buffer with ``room`` times as many rows again after its own (not written, so
    not resident): the first :func:`grow_rows` after it moves rows within it instead of copying it."""
    rows = shape[0]
    out = torch.empty((rows + int(rows * room), *shape[1:]), dtype=dtype, device=device)
    return _first_rows(out, rows) if room else out


def with_room(t: Tensor) -> Tensor:
    """A copy of the CPU tensor ``t`` in a buffer with room (:func:`empty_with_room`); ``t`` itself on any other
    device."""
    if t.device.type != "cpu" or t.ndim == 0:
        return t
    return empty_with_room(*t.shape, dtype=t.dtype).copy_(t)


def held_rows(array: np.ndarray) -> Tensor:
    """``array`` as a tensor; when it is the first rows of a larger C-ordered array (as
    :func:`graphmem.store.memory_state.read_pairs` reads a table with room), a tensor of those rows holding the
    whole buffer, so that :func:`grow_rows` grows it within its spare rows instead of copying it."""
    base = array.base
    if (
        isinstance(base, np.ndarray)
        and array.ndim >= 1
        and base.ndim == array.ndim
        and base.shape[1:] == array.shape[1:]
        and base.shape[0] > array.shape[0]
        and base.dtype == array.dtype
        and base.flags.c_contiguous
        and base.ctypes.data == array.ctypes.data
    ):
        return _first_rows(torch.from_numpy(base), array.shape[0])
    return torch.from_numpy(array)


def _first_rows(buffer: Tensor, rows: int) -> Tensor:
    """The first ``rows`` rows of the contiguous ``buffer``'s storage (they may run past ``buffer``'s own rows) as a
    tensor of its own, not a view: it holds the storage, and no tensor besides it (a view would hold its base)."""
    out = torch.empty(0, dtype=buffer.dtype, device=buffer.device)
    return out.set_(buffer.untyped_storage(), 0, (rows, *buffer.shape[1:]), buffer.stride())


def _holders(t: Tensor) -> tuple[int, int]:
    """References to ``t`` and tensors (or arrays) on its buffer, each counted as for any other tensor passed here."""
    try:
        return sys.getrefcount(t), torch._C._storage_Use_Count(t.untyped_storage()._cdata)
    except (AttributeError, RuntimeError):  # a torch without the count: never in place
        return -1, id(t)


def insertion_points(
    rowptr: Tensor, column: Tensor, rows: Tensor, values: Tensor, ties_after: bool, perm: Tensor | None = None
) -> Tensor:
    """Where each entry ``(rows[j], values[j])`` goes in a CSR layout whose row ``r`` holds ``column[rowptr[r]:
    rowptr[r + 1]]`` (with ``perm``: ``column[perm[rowptr[r]:rowptr[r + 1]]]``) in ascending order (rows at or past
    the layout's end go at its end): the first position holding a larger value (``ties_after``) or a value not
    smaller (else). One binary search for all entries at once, each within its own row."""
    n, end = rowptr.numel() - 1, rowptr[-1]
    inside, row = rows < n, rows.clamp(max=max(n - 1, 0))
    lo = torch.where(inside, rowptr[row], end) if n else torch.full_like(rows, int(end))
    hi = torch.where(inside, rowptr[row + 1], end) if n else lo.clone()
    last = max((column if perm is None else perm).numel() - 1, 0)
    while bool((lo < hi).any()):
        open_, mid = lo < hi, (lo + hi) // 2
        at = mid.clamp(max=last)
        held = column[at] if perm is None else column[perm[at]]
        right = open_ & ((held <= values) if ties_after else (held < values))
        lo, hi = torch.where(right, mid + 1, lo), torch.where(open_ & ~right, mid, hi)
    return lo


def grown_rowptr(rowptr: Tensor, rows: Tensor, n: int) -> Tensor:
    """``[n + 1]`` the ``rowptr`` of a CSR layout after entries in ``rows`` were added to the one of ``rowptr``
    (``len(rowptr) - 1 <= n`` rows; rows past them start empty)."""
    n0, out = rowptr.numel() - 1, torch.zeros(n + 1, dtype=torch.long)
    out[1:] = torch.cumsum(torch.bincount(rows, minlength=n), 0)
    out[1 : n0 + 1] += rowptr[1:]
    out[n0 + 1 :] += rowptr[-1]
    return out
