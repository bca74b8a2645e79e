"""Peak memory of a block of code, for the benchmarks.

``with PeakMemory(device) as m: ...`` then ``m.peak_mb`` is the largest memory in use during the
block above what was in use when it started:

* CUDA: ``torch.cuda.max_memory_allocated`` after a peak reset (exact, allocator bytes);
* CPU: the resident set size, sampled every ``interval_s`` by a background thread (torch kernels
  release the GIL while they run). Freed heap memory is first handed back to the system
  (glibc ``malloc_trim``), so allocations inside the block show up as new resident pages; the
  sampled value is still a lower bound of the true peak. Linux only (``/proc/self/statm``);
  elsewhere ``peak_mb`` is ``None``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from pathlib import Path

import torch

_STATM = Path("/proc/self/statm")


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (looked up once)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def release_free_heap() -> None:
    """Return freed ``malloc`` memory to the system where glibc offers ``malloc_trim`` (else nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def resident_bytes() -> int | None:
    """Resident set size of this process in bytes, or ``None`` where ``/proc`` is unavailable."""
    try:
        return int(_STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class PeakMemory:
    """Context manager measuring the peak memory of its block (see module docstring).

    Args:
        device: where the block allocates (default: ``"cpu"``).
        interval_s: CPU sampling period (default: 0.5 ms).
    """

    def __init__(self, device: str | torch.device = "cpu", interval_s: float = 5e-4) -> None:
        self.device = torch.device(device)
        self.interval_s = interval_s
        self.peak_mb: float | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        release_free_heap()
        self._base = resident_bytes()
        self._peak = self._base
        self._stop = threading.Event()
        if self._base is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._peak = max(self._peak, resident_bytes() or 0)

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
            return
        if self._base is None:
            return
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, resident_bytes() or 0)
        self.peak_mb = (self._peak - self._base) / 2**20
