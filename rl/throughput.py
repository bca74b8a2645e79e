"""Training throughput of the router: questions (and episodes) per second at batch 1 vs batched.

Both modes time the trainer's own update, :class:`rl.reinforce.ReinforceStep` (the step
:func:`rl.reinforce.train` takes, as ``scripts/train.py`` configures it: batched rollout,
discounted returns, moving-average baseline, policy-gradient loss, the edge features' anchor
term, gradient clipping, the Adam steps of router + intent head and edge features). Batch 1 takes
one optimizer step per question (``starts_per_question`` episodes); the batched mode one step over
``batch`` questions. The questions ask for random nodes of one synthetic graph; their entries come
from the embedding selector and their training tensors from :func:`rl.reinforce.prepare_questions`,
as in training; the steps run under :func:`rl.seeding.deterministic_algorithms`, as
:func:`rl.reinforce.train` runs them. Used by ``scripts/bench_train.py`` and ``scripts/benchmark.py``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping

import torch

from graphmem.datasets.types import Question
from graphmem.graph_batch import GraphBatch
from graphmem.peak_memory import PeakMemory
from graphmem.policies.base import Budget
from graphmem.policies.selectors import make_entry_selector
from graphmem.synthetic import make_synthetic_graph
from rl.distributed import World
from rl.reinforce import ReinforceStep, TrainConfig, build_modules, prepare_questions
from rl.seeding import deterministic_algorithms, seed_everything


def synthetic_questions(graph, num: int, seed: int, gold: int = 2, noise: float = 0.3):
    """``num`` questions over ``graph`` whose gold are ``gold`` random nodes, each asked with an embedding
    near its first gold node (``x + noise * N(0, I) / sqrt(D)``): ``(questions, [num, D] embeddings)``."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, graph.num_nodes, (num, gold), generator=gen)
    emb = graph.embeddings[rows[:, 0]] + noise * torch.randn(num, graph.dim, generator=gen) / graph.dim**0.5
    ids = graph.node_ids
    questions = [
        Question(f"bench-{i}", "synthetic", f"question {i}", None, tuple(ids[v] for v in r), "synthetic")
        for i, r in enumerate(rows.tolist())
    ]
    return questions, emb


def training_throughput(
    nodes: int = 2000,
    dim: int = 64,
    batch: int = 512,
    single: int = 32,
    repeats: int = 3,
    device: str = "cpu",
    seed: int = 0,
    trainer: Mapping[str, Any] | None = None,
) -> dict:
    """Questions/s and episodes/s of the trainer's update at batch 1 and at ``batch`` questions.

    Args:
        nodes, dim: the synthetic graph.
        batch: questions per batched update.
        single: batch-1 updates timed (one question each).
        repeats: each mode's rate is the fastest of this many rounds.
        device: where the modules and the rollout run.
        seed: graph, questions, initialisation and action sampling.
        trainer: :class:`rl.reinforce.TrainConfig` fields over its defaults (those of
            ``configs/trainer/default.yaml``).
    """
    cfg = TrainConfig(**{**dataclasses.asdict(TrainConfig()), **dict(trainer or {}), "seed": seed, "device": device})
    seed_everything(seed)
    dev = torch.device(device)
    graphs = {"synthetic": make_synthetic_graph(nodes, dim=dim, seed=seed)}
    union = GraphBatch.from_graphs(graphs)
    n = max(batch, single)
    questions, emb = synthetic_questions(graphs["synthetic"], n, seed + 1)
    data = prepare_questions(union, graphs, questions, emb, Budget(), make_entry_selector("embedding"))
    dtype = getattr(torch, cfg.dtype)
    data = {k: v.to(dev, dtype) if v.is_floating_point() else v.to(dev) for k, v in data.items()}
    router, intent, edges = (m.to(dev, dtype) for m in build_modules(cfg, graphs, dim))
    update = ReinforceStep(cfg, router, intent, edges, union, data, world=World())
    step = iter(range(1 << 62))

    def rate(sizes: list[int]) -> tuple[float, float, float]:
        """(questions/s, episodes/s, questions per CPU second) of one update per entry of ``sizes``
        (questions each). CPU time is the process's (all threads): on a machine shared with other
        jobs it leaves out the waits for a core that wall time includes."""
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0, c0, episodes, lo = time.perf_counter(), time.process_time(), 0, 0
        for size in sizes:
            episodes += update(torch.arange(lo, lo + size, device=dev) % data["q"].shape[0], 0, next(step))["episodes"]
            lo += size
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        return sum(sizes) / dt, episodes / dt, sum(sizes) / max(cpu, 1e-9)

    with deterministic_algorithms():  # as train() runs its steps
        rate([min(8, n)])  # warm-up
        one = max((rate([1] * single) for _ in range(repeats)), key=lambda r: r[0])  # the fastest round (wall)
        many = max((rate([batch]) for _ in range(repeats)), key=lambda r: r[0])
        with PeakMemory(dev) as mem:
            rate([batch])
    return {
        "device": str(dev),
        "nodes": nodes,
        "edges": graphs["synthetic"].num_edges,
        "dim": dim,
        "batch": batch,
        "starts_per_question": cfg.starts_per_question,
        "update": "rl.reinforce.ReinforceStep",
        "batch1_questions_per_s": one[0],
        "batched_questions_per_s": many[0],
        "batch1_episodes_per_s": one[1],
        "batched_episodes_per_s": many[1],
        "speedup": many[1] / one[1],
        "batch1_questions_per_cpu_s": one[2],
        "batched_questions_per_cpu_s": many[2],
        "cpu_speedup": many[2] / one[2],
        "batched_step_peak_mb": mem.peak_mb,
        "torch_threads": torch.get_num_threads(),
    }
