"""Training throughput of the walk router: the trainer's step at batch 1 (one question per step) vs batched.

    python scripts/benchmarks/bench_train.py                       # CPU, writes outputs/benchmark/train_episodes.json
    python scripts/benchmarks/bench_train.py --device cpu,cuda --batch 4096   # both devices in one run, with ratios

The measurement is :func:`train_throughput.training_throughput`, which times the step of the trainer
``scripts/train.py`` runs (:class:`rl.walk.trainer.WalkTrainer`: ``rollout`` then ``update``, with
``configs/trainer/default.yaml``), each phase (imitation, reinforce) on its own; ``scripts/benchmark.py``
runs it too. With several devices each is measured in turn and every later device gets its batched
episodes/s (of the reinforce phase) over the first's.

    python scripts/benchmarks/bench_train.py --ranks 1,2 --out docs/results/distributed_throughput.json

``--ranks`` measures data parallelism instead (:func:`parallel_throughput.data_parallel_throughput`):
the reinforce step at the same global batch under ``torchrun`` with each rank count (CPU, gloo), one
job after the other in this run, with each count's questions/s over the first's.

    python scripts/benchmarks/bench_train.py --cliff --out docs/results/thread_cliff.json

``--cliff`` measures the thread cliff instead (:func:`train_throughput.thread_cliff`): seconds per
training step (``--batch`` questions, ``--steps`` steps, ``--rounds`` rounds) with one busy process
beside it, threads forced to the core count (the old ``threads: 2``), the default settings, and
``OMP_NUM_THREADS=1``, with the ratios to the last. Every report records the threads it ran with.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from parallel_throughput import data_parallel_throughput
from train_throughput import thread_cliff, training_throughput

from graphmem.config.cli import ConfigError, check_device, set_threads
from graphmem.config.entry import command
from graphmem.store.io import atomic_write


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=512, help="questions per batched step")
    ap.add_argument("--single", type=int, default=32, help="batch-1 steps timed (one question each)")
    ap.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="a device, or several separated by commas (the first is the reference)",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: $OMP_NUM_THREADS, else 1)")
    ap.add_argument("--ranks", default="", help="data parallelism: rank counts separated by commas, e.g. 1,2")
    ap.add_argument("--steps", type=int, default=8, help="with --ranks / --cliff: timed steps per rank count / mode")
    ap.add_argument("--cliff", action="store_true", help="the thread cliff under one busy process (module docstring)")
    ap.add_argument("--rounds", type=int, default=2, help="with --cliff: interleaved rounds of the three modes")
    ap.add_argument("--out", default="outputs/benchmark/train_episodes.json")
    return ap


def work(args: argparse.Namespace) -> None:
    if args.cliff:
        if min(args.steps, args.rounds, args.batch) < 1:
            raise ConfigError("--steps, --rounds and --batch must be positive")
        result = thread_cliff(args.nodes, args.dim, args.batch, args.steps, args.rounds)
        return write(result, Path(args.out))
    if args.ranks:
        try:
            ranks = [int(r) for r in args.ranks.split(",")]
        except ValueError:
            raise ConfigError(f"--ranks must be integers separated by commas, got {args.ranks!r}") from None
        if not ranks or min(ranks) < 1:
            raise ConfigError(f"--ranks must be positive, got {args.ranks!r}")
        return write(data_parallel_throughput(ranks, args.nodes, args.dim, args.batch, args.steps), Path(args.out))
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    for d in devices:
        check_device(d, "--device")  # a refused device is one error line, exit status 2
    threads = set_threads({"threads": args.threads})
    runs = [training_throughput(args.nodes, args.dim, args.batch, args.single, device=d) for d in devices]
    for run in runs[1:]:
        run[f"batched_over_{runs[0]['device']}"] = run["batched_episodes_per_s"] / runs[0]["batched_episodes_per_s"]
    result = runs[0] if len(runs) == 1 else {"devices": runs}
    write({**result, "threads": threads}, Path(args.out))


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


def write(result: dict, out: Path) -> None:
    """Print ``result`` with the command line and write it to ``out`` (atomically)."""
    result = {**result, "command": "python " + " ".join(sys.argv)}
    print(json.dumps(result, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(result, indent=1)))


if __name__ == "__main__":
    sys.exit(main())
