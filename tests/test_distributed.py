"""Data-parallel training: 2 gloo ranks on CPU (started by torchrun) reproduce one process with the same global batch.

In float64 the parameters agree to ~1e-12. In float32 the reduced gradients agree to float
rounding (~1e-9), but Adam divides by ``sqrt(v) + 1e-8``: for entries whose gradient is itself
near 1e-8 — e.g. the router head's output bias, whose exact gradient is zero because a softmax
is shift-invariant — rounding noise becomes a visible step. So float32 is checked on what must be
exact (same sampled actions, identical replicas) and float64 on the parameters.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

from graphmem.graph_batch import GraphBatch
from models.edge_features import EdgeFeatures
from models.intent import RelationIntent
from models.router import QueryRouter
from rl.common.checkpoint import load_checkpoint
from rl.common.distributed import SINGLE, World
from rl.mdp import MDPConfig
from rl.reinforce import TrainConfig, train
from rl.rollout import episode_keys, make_episodes, rollout

sys.path.insert(0, str(Path(__file__).parent))
from bridge_tasks import BRIDGE_BUDGET, bridge_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# 12 questions, one entry each (BRIDGE_BUDGET), batch 5 -> steps of 5, 5 and 2 episodes: unequal slices 2/3 and 1/1
CONFIG = dict(
    epochs=3,
    seed=4,
    batch_size=5,
    starts_per_question=2,
    lr_router=1e-2,
    lr_edges=1e-2,
    device="cpu",
    entropy_coef=0.01,
    eval_every=1,
    temperature=1.0,
)  # T = 1 keeps float32 rounding from flipping samples here
TRAIN, VAL = range(12), range(500, 504)

WORKER = """
import json, sys, torch
sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r})
from bridge_tasks import BRIDGE_BUDGET, bridge_tasks
from rl.common.distributed import init_from_env, shutdown
from rl.reinforce import TrainConfig, train
world = init_from_env("cpu")
g, q, e = bridge_tasks({train}); vg, vq, ve = bridge_tasks({val})
for dtype in ("float64", "float32"):
    r = train(TrainConfig(**{cfg!r}, dtype=dtype, checkpoint_dir={out!r} + "/" + dtype), {{**g, **vg}}, q, e, vq, ve,
              budget=BRIDGE_BUDGET)
    torch.save({{"router": r.router.state_dict(), "edges": r.edges.weight.detach(), "world": [world.rank, world.size],
                "history": [{{k: v for k, v in row.items() if k != "seconds"}} for row in r.history],
                "best": [r.best_epoch, r.best_score]}}, {out!r} + f"/{{dtype}}-rank{{world.rank}}.pt")
shutdown()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _params(router_state: dict, edges: torch.Tensor) -> dict[str, torch.Tensor]:
    return {**{f"router.{k}": v for k, v in router_state.items()}, "edges": edges}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].detach().double() - b[k].detach().double()).abs().max()) for k in a)


def _history(rows):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def test_two_gloo_ranks_match_one_process(tmp_path):
    out = tmp_path / "ddp"
    out.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(
        WORKER.format(
            tests=str(Path(__file__).parent), root=str(ROOT), train=list(TRAIN), val=list(VAL), cfg=CONFIG, out=str(out)
        )
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(script),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    g, q, e = bridge_tasks(TRAIN)  # the one-process runs, while the ranks work
    vg, vq, ve = bridge_tasks(VAL)
    single = {
        dtype: train(
            TrainConfig(**CONFIG, dtype=dtype, checkpoint_dir=str(tmp_path / dtype)),
            {**g, **vg},
            q,
            e,
            vq,
            ve,
            budget=BRIDGE_BUDGET,
        )
        for dtype in ("float64", "float32")
    }
    log = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, log[-4000:]
    diffs = {}
    for dtype, one in single.items():
        ranks = [torch.load(out / f"{dtype}-rank{r}.pt", weights_only=True) for r in range(2)]
        assert [r["world"] for r in ranks] == [[0, 2], [1, 2]]
        # after k = 9 steps: rank 0's last checkpoint vs the one-process last checkpoint (router + edge features)
        ddp_last, one_last = load_checkpoint(out / dtype / "last.pt"), load_checkpoint(tmp_path / dtype / "last.pt")
        diffs[dtype] = _max_diff(
            _params(ddp_last["router"], ddp_last["edges"]["weight"]),
            _params(one_last["router"], one_last["edges"]["weight"]),
        )
        assert not torch.equal(ddp_last["edges"]["weight"], ddp_last["edges"]["initial"])  # edge features did move
        # the replicas are identical, and both ranks return rank 0's validation-selected modules
        assert (
            _max_diff(_params(ranks[0]["router"], ranks[0]["edges"]), _params(ranks[1]["router"], ranks[1]["edges"]))
            == 0
        )
        assert ranks[1]["best"] == ranks[0]["best"] and ranks[0]["best"][0] == one.best_epoch
        # the same sampled actions: episode counts, returns and successes of every epoch are the one process's
        for got, want in zip(ranks[0]["history"], _history(one.history)):
            assert got.keys() == want.keys() and got["episodes"] == want["episodes"] == 12
            assert abs(got["return"] - want["return"]) < 1e-5 and got["success"] == want["success"]
        assert all("val_recall" not in row for row in ranks[1]["history"])  # only rank 0 validates
        assert sorted(p.name for p in (out / dtype).iterdir()) == ["best.pt", "last.pt"]
    print(f"max |DDP - one process| after 9 steps: float64 {diffs['float64']:.3g}, float32 {diffs['float32']:.3g}")
    assert diffs["float64"] < 1e-8
    one = single["float64"]
    ranks = [torch.load(out / f"float64-rank{r}.pt", weights_only=True) for r in range(2)]
    assert (
        _max_diff(_params(ranks[0]["router"], ranks[0]["edges"]), _params(one.router.state_dict(), one.edges.weight))
        < 1e-8
    )
    for got, want in zip(ranks[0]["history"], _history(one.history)):
        assert all(abs(got[k] - want[k]) < 1e-6 for k in want), (got, want)  # rewards are float32 sums


def test_keyed_sampling_is_independent_of_the_batch_split():
    graphs, _, _ = bridge_tasks(range(4))
    union, edges = GraphBatch.from_graphs(graphs), EdgeFeatures(graphs)
    torch.manual_seed(0)
    router, intent = QueryRouter(16, hidden=8), RelationIntent(16)
    n = 64  # many episodes per start node so that sampled actions differ between episodes
    starts = union.node_ptr[:-1].repeat_interleave(n // 4)
    eps = make_episodes(torch.arange(n), starts[:, None], (starts + 7)[:, None], 1)  # gold: some other node
    q = torch.randn(n, 16)
    keys = episode_keys(3, 1, 2, 0, n)
    whole = rollout(router, q, intent(q), edges(), union, eps, MDPConfig(), keys=keys)
    parts = []
    for world in (World(0, 3), World(1, 3), World(2, 3)):
        mine = world.shard(n)
        k = episode_keys(3, 1, 2, int(mine[0]), len(mine))
        assert torch.equal(k, keys[mine])
        sub = eps.take(mine)
        parts.append(rollout(router, q[mine], intent(q[mine]), edges(), union, sub, MDPConfig(), keys=k).edge)
    width = whole.edge.shape[0]
    joined = torch.cat([torch.nn.functional.pad(p, (0, 0, 0, width - p.shape[0]), value=-1) for p in parts], 1)
    assert torch.equal(joined, whole.edge)
    assert len({tuple(c.tolist()) for c in whole.edge.T}) > 4  # not one deterministic walk
    assert SINGLE.shard(5).tolist() == [0, 1, 2, 3, 4] and World(1, 2).shard(5).tolist() == [2, 3, 4]


def test_keyed_sampling_follows_the_policy_distribution():
    graphs, _, _ = bridge_tasks(range(1))
    union, edges = GraphBatch.from_graphs(graphs), EdgeFeatures(graphs)
    torch.manual_seed(1)
    router, intent = QueryRouter(16, hidden=8), RelationIntent(16)
    n = 4000
    eps = make_episodes(torch.arange(n), torch.zeros(n, 1, dtype=torch.long), torch.full((n, 1), 7), 1)
    q = torch.randn(1, 16).repeat(n, 1)
    traj = rollout(router, q, intent(q), edges(), union, eps, MDPConfig(max_hops=1), keys=episode_keys(0, 0, 0, 0, n))
    counts = torch.bincount(traj.edge[0], minlength=union.graph.num_edges).float() / n
    for e in traj.edge[0].unique():
        p = traj.logp[0][traj.edge[0] == e][0].detach().exp()
        assert abs(float(counts[e]) - float(p)) < 0.03, (int(e), float(counts[e]), float(p))
