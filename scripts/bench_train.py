"""Training throughput of the walk router: the trainer's step at batch 1 (one question per step) vs batched.

    python scripts/bench_train.py                       # CPU, writes outputs/benchmark/train_episodes.json
    python scripts/bench_train.py --device cpu,cuda --batch 4096   # both devices in one run, with ratios

The measurement is :func:`rl.walk.throughput.training_throughput`, which times the step of the trainer
``scripts/train.py`` runs (:class:`rl.walk.trainer.WalkTrainer`: ``rollout`` then ``update``, with
``configs/trainer/default.yaml``), each phase (imitation, reinforce) on its own; ``scripts/benchmark.py``
runs it too. With several devices each is measured in turn and every later device gets its batched
episodes/s (of the reinforce phase) over the first's.

    python scripts/bench_train.py --ranks 1,2 --out docs/results/distributed_throughput.json

``--ranks`` measures data parallelism instead (:func:`rl.walk.parallel_throughput.data_parallel_throughput`):
the reinforce step at the same global batch under ``torchrun`` with each rank count (CPU, gloo), one
job after the other in this run, with each count's questions/s over the first's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from graphmem.cli import check_device
from graphmem.io import atomic_write
from rl.walk.parallel_throughput import data_parallel_throughput
from rl.walk.throughput import training_throughput


def main() -> None:
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
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    ap.add_argument("--ranks", default="", help="data parallelism: rank counts separated by commas, e.g. 1,2")
    ap.add_argument("--steps", type=int, default=8, help="with --ranks: timed steps per rank count")
    ap.add_argument("--out", default="outputs/benchmark/train_episodes.json")
    args = ap.parse_args()
    if args.ranks:
        try:
            ranks = [int(r) for r in args.ranks.split(",")]
        except ValueError:
            ap.error(f"--ranks must be integers separated by commas, got {args.ranks!r}")
        if not ranks or min(ranks) < 1:
            ap.error(f"--ranks must be positive, got {args.ranks!r}")
        out = Path(args.out)
        result = data_parallel_throughput(ranks, args.nodes, args.dim, args.batch, args.steps)
        result["command"] = "python " + " ".join(sys.argv)
        print(json.dumps(result, indent=1))
        atomic_write(out, lambda tmp: tmp.write_text(json.dumps(result, indent=1)))
        return
    devices = [d.strip() for d in args.device.split(",") if d.strip()]
    try:
        for d in devices:
            check_device(d, "--device")
    except ValueError as err:
        ap.error(str(err))  # one line, exit status 2
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = [training_throughput(args.nodes, args.dim, args.batch, args.single, device=d) for d in devices]
    for run in runs[1:]:
        run[f"batched_over_{runs[0]['device']}"] = run["batched_episodes_per_s"] / runs[0]["batched_episodes_per_s"]
    result = runs[0] if len(runs) == 1 else {"devices": runs}
    print(json.dumps(result, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
