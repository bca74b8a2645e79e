"""Training throughput of the router: episodes per second at batch 1 vs batched rollouts.

Both modes run the same REINFORCE update (rollout, returns, loss, backward, Adam step) on one
synthetic graph; batch 1 walks one episode with :func:`rl.rollout.rollout_reference`, the batched
mode walks ``batch`` episodes together with :func:`rl.rollout.rollout`. Used by
``scripts/bench_train.py`` and ``scripts/benchmark.py``.
"""

from __future__ import annotations

import time

import torch

from graphmem.graph_batch import GraphBatch
from graphmem.peak_memory import PeakMemory
from graphmem.synthetic import make_synthetic_graph
from models.edge_features import EdgeFeatures
from models.intent import RelationIntent
from models.router import QueryRouter
from rl.mdp import MDPConfig
from rl.rollout import make_episodes, rollout, rollout_reference


def _update(traj, opt, gamma: float = 0.99) -> None:
    returns = traj.returns(gamma)
    loss = -(traj.logp * (returns - returns.mean()).detach()).sum() / traj.logp.shape[1]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def training_throughput(
    nodes: int = 2000,
    dim: int = 64,
    batch: int = 1024,
    single: int = 64,
    repeats: int = 3,
    device: str = "cpu",
    seed: int = 0,
) -> dict:
    """Episodes/s of batch-1 and batched training steps on ``device`` (see module docstring)."""
    torch.manual_seed(seed)
    dev = torch.device(device)
    graphs = {"synthetic": make_synthetic_graph(nodes, dim=dim, seed=seed)}
    union = GraphBatch.from_graphs(graphs)
    router, intent, edges = QueryRouter(dim).to(dev), RelationIntent(dim).to(dev), EdgeFeatures(graphs).to(dev)
    opt = torch.optim.Adam([*router.parameters(), *intent.parameters(), edges.weight], lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    n = max(batch, single)
    entries = torch.randint(0, nodes, (n, 6), generator=gen).to(dev)
    gold = torch.randint(0, nodes, (n, 2), generator=gen).to(dev)
    q = torch.randn(n, dim, generator=gen).to(dev)
    cfg, sample = MDPConfig(), torch.Generator(dev).manual_seed(seed)

    def step(rows: torch.Tensor, batched: bool) -> int:
        ep = make_episodes(rows, entries[rows], gold[rows], 1)
        qe = q[ep.query]
        pi = intent(qe)
        if batched:
            traj = rollout(router, qe, pi, edges(), union, ep, cfg, generator=sample)
        else:
            traj = rollout_reference(
                router, qe, pi, edges(), union, ep, cfg, generator=torch.Generator().manual_seed(0)
            )
        _update(traj, opt)
        return len(ep)

    def timed(fn) -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        count = fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return count / (time.perf_counter() - t0)

    step(torch.arange(min(8, n), device=dev), True)  # warm-up
    one = max(
        timed(lambda: sum(step(torch.tensor([i], device=dev), False) for i in range(single))) for _ in range(repeats)
    )
    many = max(timed(lambda: step(torch.arange(batch, device=dev), True)) for _ in range(repeats))
    with PeakMemory(dev) as mem:
        step(torch.arange(batch, device=dev), True)
    return {
        "device": str(dev),
        "nodes": nodes,
        "edges": graphs["synthetic"].num_edges,
        "dim": dim,
        "batch": batch,
        "batch1_episodes_per_s": one,
        "batched_episodes_per_s": many,
        "speedup": many / one,
        "batched_step_peak_mb": mem.peak_mb,
        "torch_threads": torch.get_num_threads(),
    }
