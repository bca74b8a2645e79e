"""A training that diverged stops: a non-finite loss or weight is one ``error:`` line, never a promoted checkpoint.

Adam at a learning rate far too large, a reward that overflows or an input with an ``inf`` make the loss
NaN; left alone, every later step is NaN too, the validation score NaN, and a NaN checkpoint would be
promoted and tested. The trainers call :func:`check_loss` on each step's loss before its backward pass and
:func:`check_weights` after each optimizer step, both raising
:class:`graphmem.core.errors.DivergedError` (exit status 3) with where it happened: the phase, epoch and
step (the training script adds the fold and variant).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from graphmem.core.errors import DivergedError


def check_loss(loss: torch.Tensor | float, where: str, hint: str = "") -> None:
    """Raise :class:`DivergedError` when ``loss`` is NaN or infinite (``where``: e.g. ``reinforce epoch 2 step 5``)."""
    value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
    if not math.isfinite(value):
        raise DivergedError(f"loss is {value} in {where}{hint}: training diverged; nothing promoted to best.pt")


def check_weights(module: nn.Module, where: str, hint: str = "") -> None:
    """Raise :class:`DivergedError` naming the first parameter of ``module`` that holds a NaN or infinite value."""
    for name, p in module.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            bad = int((~torch.isfinite(p)).sum())
            raise DivergedError(
                f"parameter {name!r} holds {bad} non-finite values after the optimizer step of {where}{hint}: "
                "training diverged; nothing promoted to best.pt"
            )
