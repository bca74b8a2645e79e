"""The random states a training checkpoint carries, and the checkpoint saver and loader it is written with.

A walk router checkpoint (``kind: walk``, written by :class:`rl.walk.trainer.WalkTrainer`) holds the
walk scorer's config and state dict, the optimizer, the moving-average baseline, every RNG state
(:func:`rng_state`: Python, NumPy, torch CPU/CUDA, the sampling generator), the phase and epoch, the
train config, the training history, the best validation score and the run's id. It is saved and
loaded by the one saver and loader of :mod:`graphmem.store.checkpoint` (format tag, kind, inputs record,
SHA-256 over its tensors, ``weights_only`` loading), re-exported here.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

import numpy as np
import torch

from graphmem.store.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

__all__ = ["CheckpointError", "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]


def rng_state(generator: torch.Generator | None = None) -> dict[str, Any]:
    """Every random state a run uses, as tensors and plain lists."""
    np_state = np.random.get_state()
    state = {
        "python": [list(random.getstate()[1]), random.getstate()[0], random.getstate()[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *map(float, np_state[2:])],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def set_rng_state(state: Mapping[str, Any], generator: torch.Generator | None = None) -> None:
    """Inverse of :func:`rng_state`."""
    internal, version, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if generator is not None and "generator" in state:
        generator.set_state(state["generator"])
