"""``docs/distributed.md``: data-parallel training of the walk (torchrun, SLURM through Hydra's submitit
launcher), with the measured throughput of ``docs/results/distributed_throughput.json``."""

from __future__ import annotations

from pathlib import Path

from graphmem.docgen.sources import read_json

PROSE = """# Data-parallel training

`scripts/train.py` trains the walk (`rl/walk/trainer.py`) in one process, or data-parallel over
`torch.distributed` when started by `torchrun` (gloo on CPU, nccl on CUDA). What each rank does
(`rl/walk/parallel.py`):

* **Questions are sharded per step.** Every rank holds the scorer and all training graphs and
  questions; each optimizer step takes one global batch (`trainer.optim.batch_size` questions over
  all ranks, the same permutation on every rank) and rank `r` walks the `r`-th contiguous slice.
* **Sampling does not depend on the split.** The uniforms of a batch's draws are drawn for the whole
  global batch on every rank, and each rank walks with its rows: a question's sampled walk is the one
  it gets in one process.
* **Losses are shares of the one-process loss.** Every batch mean (supervised steps, episodes, acted
  steps, the moving baseline's per-step means) takes its sums and counts summed over the ranks, so
  rank `r`'s loss `L_r` satisfies `L = Σ_r L_r` for the one-process loss `L` of the batch, also for
  slices of unequal size; the anchor term is taken over the pairs the whole batch touched.
* **Gradients: DistributedDataParallel.** DDP wraps `WalkLoss`, the module whose forward is the
  step's loss, and averages the gradients; each rank back-propagates `N · L_r + λ · L_anchor`, so
  the average is the one-process gradient. Clipping and Adam see the same gradient everywhere.
* **Rank 0** logs the one W&B run, writes `last.pt` / `best.pt`, evaluates on the test
  conversations and writes the results. Validation is sharded and its recall summed.
* **Resume** (`trainer.run.resume=true`): every rank reads `last.pt` from the shared run folder.

## Same checkpoint as one process

`tests/test_distributed.py` (default test run) trains LoCoMo conversations with
`torchrun --nproc_per_node=2 scripts/train.py` and with one process at the same global batch (45,
so the ranks' slices differ in size), and compares `last.pt` and `best.pt`. What is discrete is
equal: every epoch's sampled returns and validation recall, the selected epoch, the test recall.
The weights agree to float rounding, not bit for bit: one process sums a batch's gradient terms in
one reduction, two ranks in two halves added by the all-reduce. Adam divides each gradient by its
running RMS, so a weight whose true gradient is at rounding level (the bias of a ReLU unit that is
off on almost every input) can take steps of up to the learning rate in a direction rounding picks;
the test allows 0.1% of the weights such a difference (below 10 lr) and holds the rest to 1e-6.

## Commands

    torchrun --nproc_per_node=2 scripts/train.py trainer.run.device=cpu     # 2 gloo ranks on one machine
    torchrun --nproc_per_node=4 scripts/train.py trainer.run.device=cuda    # 4 GPUs, nccl, cuda:<local rank>
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=<host>:29500 scripts/train.py

On SLURM, Hydra's submitit launcher (`configs/hydra/launcher/slurm.yaml`) submits each sweep job;
`tasks_per_node` ranks per node (with as many GPUs) make a job data-parallel, and
`rl.common.distributed.init_from_env` derives `RANK`, `WORLD_SIZE` and `MASTER_ADDR` from the
SLURM task layout:

    python scripts/train.py -m hydra/launcher=slurm hydra.launcher.partition=<partition> \\
        hydra.launcher.nodes=2 hydra.launcher.tasks_per_node=4 hydra.launcher.gpus_per_node=4 \\
        trainer.run.device=cuda graphset=outputs/graphs/locomo cv.folds=[0],[1],[2],[3],[4]

The run folder (`out_dir`) must be on a file system every node sees (checkpoints, resume).
`trainer.optim.batch_size` is the global batch: the same value gives the same training on any
number of ranks.
"""


def _throughput(payload: dict) -> list[str]:
    lines = [
        f"Command: `{payload['command']}` (reinforce step, synthetic graph of {payload['nodes']} nodes, "
        f"global batch {payload['global_batch']}, {payload['steps']} timed steps per rank count, "
        f"{payload['cpu_count']} CPU cores).",
        "",
        "| ranks | questions/s | over 1 rank | wall s | rank-0 CPU s | load average before (1, 5, 15 min) |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for n, r in payload["ranks"].items():
        load = ", ".join(f"{x:.1f}" for x in r["load_average_before"])
        lines.append(
            f"| {n} | {r['questions_per_s']:.1f} | {r['over_1_rank']:.2f} | {r['wall_s']:.3f} | "
            f"{r['rank0_cpu_s']:.3f} | {load} |"
        )
    return lines


def render(results_dir: Path) -> str:
    """The whole page: the prose above, then the throughput table when its results file exists."""
    out = [PROSE.rstrip(), "", "## Throughput: 2 ranks against 1", ""]
    path = Path(results_dir) / "distributed_throughput.json"
    if not path.is_file():
        out.append("Not measured yet: `python scripts/benchmarks/bench_train.py --ranks 1,2 --out " + str(path) + "`.")
    else:
        out += _throughput(read_json(path))
        out += [
            "",
            "Both rank counts ran in one benchmark run, one after the other, on the same machine. Wall time",
            "includes waits for a core when the machine is shared (see the load average); the ratio is only",
            "a speed-up where each rank has a core of its own.",
        ]
    return "\n".join(out) + "\n"
