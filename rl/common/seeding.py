"""Same seed, same thread count, same numbers: every generator seeded, torch's deterministic algorithms on.

Why this is needed on CPU: the backward of advanced indexing (``edge_attr[edges]``,
``modulation[episode]`` in a rollout) is ``index_put_(accumulate=True)``, which torch runs on
several threads adding floats in whatever order the threads reach them. With two or more threads
the gradients differed in their last bits from run to run; Adam carried the difference on, and
four identical 6-epoch runs ended with losses 0.0808 / 0.0808 / 0.0861 / 0.0469.
``torch.use_deterministic_algorithms(True)`` gives that backward (and every other op that has one)
a deterministic implementation; ops without one warn instead of failing (``warn_only``).

What stays outside: a different thread count may order parallel sums differently; on CUDA, ops
without a deterministic kernel (torch warns naming them); ``torchrun`` reductions across ranks
(:mod:`rl.common.distributed`); wall-time fields.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import sys
from typing import Callable, Iterator, TypeVar

import numpy as np
import torch

F = TypeVar("F", bound=Callable)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (every device) with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """Within the block, torch uses deterministic algorithms where it has them; the previous mode is restored."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it to be deterministic
    _use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        _use_deterministic_algorithms(before[0], warn_only=before[1])


def _use_deterministic_algorithms(mode: bool, *, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms`` without its import of the inductor compiler (about 1.2 s of every
    training process's start), which it loads only to set its own ``deterministic`` flag: nothing here compiles,
    so that flag is set only where inductor is already loaded. The switch itself is the call the public function
    makes after that import."""
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = mode
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def deterministic(fn: F) -> F:
    """Decorator: run ``fn`` under :func:`deterministic_algorithms`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with deterministic_algorithms():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
