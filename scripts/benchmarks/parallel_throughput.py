"""Data-parallel training throughput: the walk trainer's step under ``torchrun`` with ``N`` ranks vs 1.

For each rank count, one ``torchrun --nproc_per_node=N`` job runs :func:`worker`: every rank builds the
same :class:`rl.walk.trainer.WalkTrainer` (``configs/trainer/default.yaml``, the questions of
:func:`train_throughput.synthetic_questions` on one synthetic graph) and takes ``steps`` steps of
the reinforce phase at the same *global* batch (``batch`` questions over all ranks), as
:meth:`~rl.walk.trainer.WalkTrainer.learn` takes them (``update(rollout(rows))``: sampled walks of the
rank's slice, the loss, DDP's all-reduce of the gradients, one Adam step), after one warm-up step
and a barrier. Rank 0 reports the wall time and process CPU time of the timed steps; the rate is
global questions per second. The 1-rank job runs the same code through ``torchrun`` (no process
group: one process). :func:`data_parallel_throughput` runs the jobs one after the other and reports
each count's rate over the 1-rank rate, so the ratio comes from one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import torch
from train_throughput import default_trainer, synthetic_questions

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.config.entry import command
from graphmem.store.io import write_json
from rl.common.distributed import init_from_env, shutdown
from rl.common.seeding import deterministic_algorithms
from rl.walk.trainer import TrainConfig, WalkTrainer

ROOT = Path(__file__).resolve().parents[2]  # the repository: graphmem and rl import from it


def worker(nodes: int, dim: int, batch: int, steps: int, seed: int, out: str) -> None:
    """One rank's part of the measurement (module docstring); rank 0 writes ``out`` (JSON)."""
    torch.set_num_threads(1)
    world = init_from_env("cpu")
    try:
        cfg = TrainConfig.merged(default_trainer(), {}, seed=seed, device="cpu", checkpoint_dir="")
        graph = make_synthetic_graph(nodes, dim=dim, seed=seed)
        questions, emb = synthetic_questions(graph, batch * (steps + 1), seed + 1)
        trainer = WalkTrainer(cfg, {"synthetic": graph}, questions, emb)
        phase = cfg.phases()[-1][0]
        with deterministic_algorithms():
            trainer._start_phase(len(cfg.phases()) - 1)
            trainer.update(trainer.rollout(torch.arange(batch), phase), phase)  # warm-up
            world.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            for step in range(1, steps + 1):
                rows = torch.arange(step * batch, (step + 1) * batch)
                trainer.update(trainer.rollout(rows, phase), phase)
            world.barrier()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if world.is_main:
            write_json(out, {"ranks": world.size, "wall_s": wall, "rank0_cpu_s": cpu}, indent=None)
    finally:
        shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def data_parallel_throughput(
    ranks: Sequence[int] = (1, 2),
    nodes: int = 2000,
    dim: int = 64,
    batch: int = 256,
    steps: int = 8,
    seed: int = 0,
    workdir: str | Path = "outputs/benchmark/data_parallel",
) -> dict:
    """Global questions/s of the reinforce step with each rank count of ``ranks`` (CPU, gloo), and their
    ratios over the first count (module docstring)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    runs = {}
    for n in ranks:
        out = workdir / f"ranks{n}.json"
        out.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={n}"]
        cmd += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(Path(__file__).resolve())]
        cmd += [f"--{k}={v}" for k, v in dict(nodes=nodes, dim=dim, batch=batch, steps=steps, seed=seed).items()]
        load = os.getloadavg()
        proc = subprocess.run([*cmd, f"--out={out}"], cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun with {n} ranks failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        run = json.loads(out.read_text())
        run["questions_per_s"] = batch * steps / run["wall_s"]
        run["load_average_before"] = load
        runs[str(n)] = run
    base = runs[str(ranks[0])]["questions_per_s"]
    for run in runs.values():
        run[f"over_{ranks[0]}_rank"] = run["questions_per_s"] / base
    return {
        "update": "rl.walk.trainer.WalkTrainer.rollout+update (reinforce), DDP over gloo",
        "nodes": nodes,
        "dim": dim,
        "global_batch": batch,
        "steps": steps,
        "cpu_count": os.cpu_count(),
        "ranks": runs,
    }


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="one rank of the data-parallel throughput measurement")
    for name in ("nodes", "dim", "batch", "steps", "seed"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--out", required=True)
    return ap


def work(a: argparse.Namespace) -> None:
    worker(a.nodes, a.dim, a.batch, a.steps, a.seed, a.out)


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
