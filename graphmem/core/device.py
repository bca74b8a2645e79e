"""Devices: the one ``resolve_device`` every policy, trainer and script calls first."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, with ``"auto"`` = ``cuda`` when available, else ``cpu``; a CUDA device
    is refused with a clear error where CUDA is not available."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} requested, but CUDA is not available here")
    return dev
