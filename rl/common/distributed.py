"""Data-parallel REINFORCE over ``torch.distributed`` (``torchrun``; gloo on CPU, nccl on CUDA).

Every rank holds a full replica of the router, the intent head and the edge features of every
graph. Each optimizer step works on one global batch of questions, the same on every rank
(the question order comes from a generator seeded identically everywhere); the batch's episodes
are split into contiguous slices and each rank rolls out only its slice. What is reduced, and why:

* **Episode statistics** (:meth:`World.all_reduce_sum`, float64): the sum of returns over acted
  steps, the acted-step count, the episode count, the per-episode rewards and successes. The
  moving-average baseline is updated from the *global* mean return and the losses are divided by
  the *global* counts, so every rank holds the same baseline and its loss is its share of the
  one-process loss ``-(1/B) Σ_episodes Σ_t log π · A`` over the whole batch.
* **Gradients** (:meth:`World.all_reduce_grads`, a SUM over ranks, one flat bucket): because each
  rank's loss already carries the global ``1/B``, the sum of the ranks' gradients *is* the
  one-process gradient of the batch — also when the slices are of unequal size, which a plain
  average (DDP's ``1/N``) would get wrong. This covers the router and intent parameters and the
  edge-feature matrix of every graph, so edge features stay identical across ranks. The anchor
  ``λ ||E - E0||^2`` depends on the parameters only: it is back-propagated after the reduction,
  on every rank, so it is counted once. Clipping and Adam then see identical gradients and keep
  the replicas identical.

Why not ``torch.nn.parallel.DistributedDataParallel``: it averages gradients (``1/N``), which
is exact only for equal slices; a rollout calls the router once per hop (several forwards per
backward) and the edge-feature matrix is not a module's output, so DDP would need
``find_unused_parameters`` and a wrapper around a bare parameter. One explicit all-reduce makes the
equivalence with one process a line-by-line argument: same batch, same per-episode actions (see
:func:`rl.walk.parallel.batch_noise`: the uniforms of the draws are drawn for the whole global
batch and each rank walks with its rows of them), same summed gradient. N ranks then reproduce
one process up to the order of floating-point additions.

:class:`World` with ``size == 1`` is the single-process case: every collective is the identity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place among ``size`` ranks (``rank 0`` validates, logs and checkpoints)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def device(self, device: torch.device) -> torch.device:
        """This rank's device: ``cuda:<local_rank>`` (modulo the visible GPUs) for CUDA, else ``device``."""
        if device.type != "cuda" or not self.distributed:
            return device
        return torch.device("cuda", self.local_rank % max(torch.cuda.device_count(), 1))

    def shard(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Indices ``[lo, hi)`` of this rank's contiguous slice of ``n`` rows (sizes differ by at most one)."""
        lo, hi = self.rank * n // self.size, (self.rank + 1) * n // self.size
        return torch.arange(lo, hi, device=device)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks (in place; returned for chaining)."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def all_reduce_grads(self, params: Sequence[torch.Tensor]) -> None:
        """Sum ``.grad`` over ranks, in one flat bucket.

        A parameter whose gradient is ``None`` on every rank stays ``None`` (an optimizer then skips
        it, as one process would); one that has a gradient on some rank only (e.g. a rank with an
        empty slice) takes zeros on the others before the sum.
        """
        if not self.distributed or not params:
            return
        ref = params[0]
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=ref.device)
        dist.all_reduce(has, op=dist.ReduceOp.SUM)
        live = [p for p, h in zip(params, has.tolist()) if h > 0]
        if not live:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in live])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        for p, g in zip(live, flat.split([p.numel() for p in live])):
            p.grad = g.view_as(p).clone()

    def broadcast_object(self, obj: Any, device: torch.device | None = None) -> Any:
        """Rank 0's ``obj`` on every rank (checkpoint state on resume, the selected best modules)."""
        if not self.distributed:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=device if device is not None and device.type == "cuda" else None)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


SINGLE = World()


def current_world() -> World:
    """The world of the initialised default process group, or :data:`SINGLE` when there is none."""
    if not (dist.is_available() and dist.is_initialized()):
        return SINGLE
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def init_from_env(device: str = "auto") -> World:
    """Join the process group described by ``torchrun``'s environment when ``WORLD_SIZE > 1``.

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. Under a
    SLURM job started with several tasks (e.g. by the submitit launcher) and without those
    variables, they are derived from the job's environment first. The backend is nccl when this
    rank will train on CUDA (``device`` cuda, or auto with CUDA available), else gloo.
    """
    if "WORLD_SIZE" not in os.environ and int(os.environ.get("SLURM_NTASKS", 1)) > 1:
        from submitit.helpers import TorchDistributedEnvironment  # the SLURM launcher's dependency

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    size = int(os.environ.get("WORLD_SIZE", 1))
    if size <= 1:
        return SINGLE
    if not dist.is_initialized():
        cuda = torch.cuda.is_available() and device in ("auto", "cuda") or device.startswith("cuda:")
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return current_world()


def shutdown(wait: bool = False) -> None:
    """Leave the process group (if one was joined); with ``wait``, once every rank has come this far, so that no
    rank tears its connections down while another is still using them."""
    if dist.is_available() and dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()
