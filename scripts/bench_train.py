"""Training throughput of the router: episodes/s at batch 1 (one episode per update) vs batched rollouts.

    python scripts/bench_train.py                       # CPU, writes outputs/benchmark/train_episodes.json
    python scripts/bench_train.py --device cpu,cuda --batch 8192   # both devices in one run, with ratios

Both modes run the same REINFORCE update (rollout, returns, loss, backward, Adam step) on one
synthetic graph; batch 1 walks one episode with :func:`rl.rollout.rollout_reference`, the batched
mode walks ``--batch`` episodes together with :func:`rl.rollout.rollout`. With several devices
each is measured in turn and every later device gets its batched episodes/s over the first's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from graphmem.peak_memory import PeakMemory
from graphmem.synthetic import make_synthetic_graph
from models.edge_features import EdgeFeatures
from models.intent import RelationIntent
from models.router import QueryRouter
from rl.mdp import GraphUnion, MDPConfig
from rl.rollout import make_episodes, rollout, rollout_reference


def _update(traj, opt, gamma: float = 0.99) -> None:
    returns = traj.returns(gamma)
    loss = -(traj.logp * (returns - returns.mean()).detach()).sum() / traj.logp.shape[1]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def bench(nodes: int = 2000, dim: int = 64, batch: int = 1024, single: int = 64, repeats: int = 3,
          device: str = "cpu", seed: int = 0) -> dict:
    """Episodes/s of batch-1 and batched training steps (see module docstring)."""
    torch.manual_seed(seed)
    dev = torch.device(device)
    graphs = {"synthetic": make_synthetic_graph(nodes, dim=dim, seed=seed)}
    union = GraphUnion.build(graphs, dev)
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
            traj = rollout_reference(router, qe, pi, edges(), union, graphs, ep, cfg, generator=torch.Generator().manual_seed(0))
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
    one = max(timed(lambda: sum(step(torch.tensor([i], device=dev), False) for i in range(single))) for _ in range(repeats))
    many = max(timed(lambda: step(torch.arange(batch, device=dev), True)) for _ in range(repeats))
    with PeakMemory(dev) as mem:
        step(torch.arange(batch, device=dev), True)
    return {"device": str(dev), "nodes": nodes, "edges": graphs["synthetic"].num_edges, "dim": dim, "batch": batch,
            "batch1_episodes_per_s": one, "batched_episodes_per_s": many, "speedup": many / one,
            "batched_step_peak_mb": mem.peak_mb, "torch_threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--single", type=int, default=64, help="episodes timed at batch 1")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="a device, or several separated by commas (the first is the reference)")
    ap.add_argument("--out", default="outputs/benchmark/train_episodes.json")
    args = ap.parse_args()
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    runs = [bench(args.nodes, args.dim, args.batch, args.single, device=d) for d in devices]
    for run in runs[1:]:
        run[f"batched_over_{runs[0]['device']}"] = run["batched_episodes_per_s"] / runs[0]["batched_episodes_per_s"]
    result = runs[0] if len(runs) == 1 else {"devices": runs}
    print(json.dumps(result, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
