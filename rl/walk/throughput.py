"""Training throughput of the walk router: questions (and episodes) per second at batch 1 vs batched.

Both modes time the step of the trainer ``scripts/train.py`` runs, :class:`rl.walk.trainer.WalkTrainer`,
as its :meth:`~rl.walk.trainer.WalkTrainer.learn` takes it for every batch of every phase:

    stats = trainer.update(trainer.rollout(rows, phase), phase)

(sampled walks, then the phase's loss, the edge features' anchor term, gradient clipping and one
Adam step), under :func:`rl.common.seeding.deterministic_algorithms`, with the settings of
``configs/trainer/default.yaml`` (model, objective, optimizer). Each phase of that config
(``imitation``, then ``reinforce``) is timed on its own, with the fresh Adam and baseline the trainer
starts the phase with. Batch 1 takes one step per question; the batched mode one step over ``batch``
questions. The questions ask for random nodes of one synthetic graph; their entries come from the
embedding selector, as in training. Used by ``scripts/bench_train.py`` and ``scripts/benchmark.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import OmegaConf

from graphmem.datasets.types import Question
from graphmem.peak_memory import PeakMemory
from graphmem.synthetic import make_synthetic_graph
from rl.common.seeding import deterministic_algorithms
from rl.walk.trainer import TrainConfig, WalkTrainer

DEFAULT_TRAINER = Path(__file__).resolve().parents[2] / "configs" / "trainer" / "default.yaml"


def default_trainer() -> dict[str, Any]:
    """The parts of ``configs/trainer/default.yaml`` (``model``, ``objective``, ``optim``, ``run``)."""
    values = OmegaConf.to_container(OmegaConf.load(DEFAULT_TRAINER))
    return {k: v for k, v in values.items() if k != "defaults"}


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


def _phase_rates(trainer: WalkTrainer, phase: str, batch: int, single: int, repeats: int) -> dict[str, float]:
    """Batch-1 and batched rates of ``phase``'s step (module docstring)."""
    n, dev = len(trainer.train), trainer.device
    offset = iter(range(1 << 62))

    def rate(sizes: list[int]) -> tuple[float, float, float]:
        """(questions/s, episodes/s, questions per CPU second) of one step per entry of ``sizes``
        (questions each). CPU time is the process's (all threads): on a machine shared with other
        jobs it leaves out the waits for a core that wall time includes."""
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0, c0, episodes = time.perf_counter(), time.process_time(), 0
        for size in sizes:
            lo = next(offset) * size
            rows = torch.arange(lo, lo + size, device=dev) % n
            batch_ = trainer.rollout(rows, phase)
            trainer.update(batch_, phase)
            episodes += int(batch_.episodes.count.shape[0])  # HAGE's MDP: several episodes per question
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        return sum(sizes) / dt, episodes / dt, sum(sizes) / max(cpu, 1e-9)

    rate([min(8, n)])  # warm-up (and the baseline's first values)
    one = max((rate([1] * single) for _ in range(repeats)), key=lambda r: r[0])  # the fastest round (wall)
    many = max((rate([batch]) for _ in range(repeats)), key=lambda r: r[0])
    with PeakMemory(dev) as mem:
        rate([batch])
    return {
        "batch1_questions_per_s": one[0],
        "batched_questions_per_s": many[0],
        "batch1_episodes_per_s": one[1],
        "batched_episodes_per_s": many[1],
        "speedup": many[1] / one[1],
        "batch1_questions_per_cpu_s": one[2],
        "batched_questions_per_cpu_s": many[2],
        "cpu_speedup": many[2] / one[2],
        "batched_step_peak_mb": mem.peak_mb,
    }


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
    """Questions/s and episodes/s of the trainer's step at batch 1 and at ``batch`` questions, per phase.

    The top-level rates are those of the policy-gradient phase (the last in the config); ``phases``
    holds every phase's.

    Args:
        nodes, dim: the synthetic graph.
        batch: questions per batched step.
        single: batch-1 steps timed (one question each).
        repeats: each mode's rate is the fastest of this many rounds.
        device: where the scorer and the walks run.
        seed: graph, questions, initialisation and action sampling.
        trainer: overrides of ``configs/trainer/default.yaml`` (``part -> key -> value``).
    """
    cfg = TrainConfig.merged(default_trainer(), trainer or {}, seed=seed, device=device, checkpoint_dir="")
    graph = make_synthetic_graph(nodes, dim=dim, seed=seed)
    questions, emb = synthetic_questions(graph, max(batch, single, 8), seed + 1)
    walker = WalkTrainer(cfg, {"synthetic": graph}, questions, emb)
    phases = {}
    with deterministic_algorithms():  # as learn() runs its steps
        for index, (phase, _, _) in enumerate(walker.cfg.phases()):
            walker._start_phase(index)  # the phase's fresh Adam and baseline, as learn() starts it
            phases[phase] = _phase_rates(walker, phase, batch, single, repeats)
    main = phases[next(reversed(phases))]
    return {
        "device": str(walker.device),
        "nodes": nodes,
        "edges": graph.num_edges,
        "dim": dim,
        "batch": batch,
        "update": "rl.walk.trainer.WalkTrainer.rollout+update",
        "phase": next(reversed(phases)),
        **main,
        "phases": phases,
        "torch_threads": torch.get_num_threads(),
    }
