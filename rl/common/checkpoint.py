"""Router checkpoints: plain tensors and containers only, written atomically, loaded with ``weights_only``.

A checkpoint is one ``torch.save``'d dict (``kind: walk``, written by :class:`rl.walk.trainer.WalkTrainer`)
holding the walk scorer's config and state dict, the optimizer, the moving-average baseline, every RNG
state (Python, NumPy, torch CPU/CUDA, the sampling generator), the phase and epoch, the train config,
the training history, the best validation score and the run's id. Loading never unpickles code
(``torch.load(weights_only=True)``); a checkpoint of another run is refused with a message naming both.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from graphmem.checkpoint import CheckpointError
from graphmem.io import atomic_write

FORMAT = "graphmem-router-checkpoint-v1"
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


def save_checkpoint(path: str | Path, state: Mapping[str, Any]) -> Path:
    """Write ``state`` (plus the format tag) atomically to ``path``."""
    payload = {"format": FORMAT, **state}
    return atomic_write(path, lambda tmp: torch.save(payload, str(tmp)))


def load_checkpoint(
    path: str | Path,
    map_location: str | torch.device = "cpu",
    run_id: str | None = None,
) -> dict[str, Any]:
    """Load and check a checkpoint.

    Args:
        run_id: the run the checkpoint must belong to (:mod:`rl.common.run_folder`) (default: not checked).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(str(path), map_location=map_location, weights_only=True)
    except Exception as err:  # UnpicklingError for code objects, RuntimeError for truncated files
        raise CheckpointError(f"{path}: refused to load (not a plain-tensor checkpoint or corrupted): {err}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} file")
    if run_id and state.get("run_id") != run_id:
        raise CheckpointError(f"{path}: written by run {state.get('run_id')!r}, not by this run {run_id!r}")
    return state
