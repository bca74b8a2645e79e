"""``docs/distributed.md``: data-parallel training of the walk (torchrun, SLURM through Hydra's submitit
launcher), with the measured throughput of ``docs/results/distributed_throughput.json``."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import fill, read_json

PAGE = "distributed"


def _throughput(payload: dict) -> list[str]:
    lines = [
        fill(
            PAGE,
            "throughput_lead",
            command=payload["command"],
            nodes=payload["nodes"],
            batch=payload["global_batch"],
            steps=payload["steps"],
            cores=payload["cpu_count"],
        ),
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
    out = [fill(PAGE, "prose"), "", fill(PAGE, "throughput"), ""]
    path = Path(results_dir) / "distributed_throughput.json"
    if not path.is_file():
        out.append(fill(PAGE, "not_measured", path=path))
    else:
        out += _throughput(read_json(path))
        out += ["", fill(PAGE, "throughput_note")]
    return "\n".join(out) + "\n"
