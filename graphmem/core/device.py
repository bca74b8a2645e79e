"""Devices: the one ``resolve_device`` every policy, trainer and script calls first, and moving cached values."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor


def resolve_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, with ``"auto"`` = ``cuda`` when available, else ``cpu``; a CUDA device
    is refused with a clear error where CUDA is not available."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} requested, but CUDA is not available here")
    return dev


def to_device(value: Any, device: str | torch.device) -> Any:
    """A tensor (or numpy array), or a tuple of them (other items unchanged), moved to ``device``."""
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value).to(device)
    if isinstance(value, tuple):
        moved = [to_device(v, device) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else tuple(moved)  # named tuples keep their type
    return value
