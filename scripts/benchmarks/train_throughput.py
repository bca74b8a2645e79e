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
embedding selector, as in training. Used by ``scripts/benchmarks/bench_train.py`` and ``scripts/benchmark.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import torch
from omegaconf import OmegaConf

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.config.cli import set_threads
from graphmem.datasets.types import Question
from graphmem.tracking.peak_memory import PeakMemory
from rl.common.seeding import deterministic_algorithms
from rl.walk.trainer import TrainConfig, WalkTrainer

HERE = Path(__file__).resolve().parent
CLIFF_CHILD = "import sys; sys.path.insert(0, {here!r}); import train_throughput as t; t.cliff_child(sys.argv[1])"
DEFAULT_TRAINER = HERE.parents[1] / "configs" / "trainer" / "default.yaml"


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


# ---------------------------------------------------------------------- the thread cliff
CLIFF_MODES = ("forced", "default", "omp1")
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def step_seconds(nodes: int, dim: int, batch: int, steps: int, seed: int = 0) -> list[float]:
    """Wall seconds of each of ``steps`` steps of the trainer's policy-gradient phase (``rollout`` then
    ``update`` over ``batch`` questions, as :func:`training_throughput` times them), after one warm-up step."""
    cfg = TrainConfig.merged(default_trainer(), {}, seed=seed, device="cpu", checkpoint_dir="")
    graph = make_synthetic_graph(nodes, dim=dim, seed=seed)
    questions, emb = synthetic_questions(graph, batch * (steps + 1), seed + 1)
    walker = WalkTrainer(cfg, {"synthetic": graph}, questions, emb)
    out = []
    with deterministic_algorithms():
        walker._start_phase(len(walker.cfg.phases()) - 1)
        phase = walker.cfg.phases()[-1][0]
        for i in range(steps + 1):
            t = time.perf_counter()
            walker.update(walker.rollout(torch.arange(i * batch, (i + 1) * batch), phase), phase)
            out.append(time.perf_counter() - t)
    return out[1:]


def cliff_child(spec: str) -> None:
    """One mode of :func:`thread_cliff`, in its own process: size the threads, time the steps, print JSON.

    ``forced``: ``torch.set_num_threads`` to the affinity count (what a fixed ``threads: 2`` did on two
    cores); ``default`` and ``omp1``: :func:`graphmem.config.cli.set_threads` with ``threads: null`` (the
    parent leaves ``OMP_NUM_THREADS`` unset, or sets it to 1)."""
    args = json.loads(spec)
    if args["mode"] == "forced":
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    else:
        set_threads({"threads": None})
    seconds = step_seconds(args["nodes"], args["dim"], args["batch"], args["steps"])
    print(json.dumps({"threads": torch.get_num_threads(), "interop": torch.get_num_interop_threads(), "s": seconds}))


def _child_env(mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**env, "OMP_NUM_THREADS": "1"} if mode == "omp1" else env


def thread_cliff(nodes: int = 2000, dim: int = 64, batch: int = 64, steps: int = 8, rounds: int = 2) -> dict:
    """Seconds per training step under a deliberately busy machine, at three thread settings, one run.

    One busy process (a Python spin loop, one core, bounded to 15 minutes and stopped at the end) runs
    for the whole measurement. Each mode (:func:`cliff_child`) runs in a fresh process, the modes
    interleaved for ``rounds`` rounds; a mode's time is the median over its steps of all rounds. The
    ratios ``default / omp1`` and ``forced / omp1`` are those of the medians: ``forced`` is the old
    fixed ``threads: 2``, ``default`` what a script does now with ``OMP_NUM_THREADS`` unset."""
    busy = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=900)])
    runs: dict[str, list[dict]] = {m: [] for m in CLIFF_MODES}
    load = [os.getloadavg()]
    try:
        time.sleep(1.0)  # the spin loop holds its core before the first mode starts
        for _ in range(rounds):
            for mode in CLIFF_MODES:
                spec = json.dumps({"mode": mode, "nodes": nodes, "dim": dim, "batch": batch, "steps": steps})
                code = CLIFF_CHILD.format(here=str(HERE))
                done = subprocess.run(
                    [sys.executable, "-c", code, spec], env=_child_env(mode), capture_output=True, text=True
                )
                if done.returncode:
                    raise RuntimeError(f"thread cliff mode {mode} failed: {done.stderr.strip()[-500:]}")
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
        load.append(os.getloadavg())
    finally:
        busy.kill()
        busy.wait()
    modes = {
        m: {
            "torch_threads": r[0]["threads"],
            "interop_threads": r[0]["interop"],
            "step_s_median": statistics.median(s for x in r for s in x["s"]),
            "step_s_rounds": [statistics.median(x["s"]) for x in r],
        }
        for m, r in runs.items()
    }
    base = modes["omp1"]["step_s_median"]
    return {
        "update": "rl.walk.trainer.WalkTrainer.rollout+update (reinforce phase)",
        "nodes": nodes,
        "dim": dim,
        "batch": batch,
        "steps": steps,
        "rounds": rounds,
        "cores_allowed": len(os.sched_getaffinity(0)),
        "busy": "one Python spin loop (one core) for the whole run",
        "load_average_at_start": load[0],
        "load_average_at_end": load[-1],
        "modes": modes,
        "default_over_omp1": modes["default"]["step_s_median"] / base,
        "forced_over_omp1": modes["forced"]["step_s_median"] / base,
    }
