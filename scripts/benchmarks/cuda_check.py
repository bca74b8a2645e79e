"""The CUDA proof, as one prepared run on a machine with a GPU.

Stages, each written to ``<out>/cuda_check.json`` as soon as it ends (an interrupted run keeps the
stages it finished), each under its own time limit:

a. ``tests``: the GPU-relevant tests (device placement, batched policies, graph batches, the walk
   trainer, readers) with ``pytest -m "not slow"``;
b. ``benchmark``: every policy's batched evaluation and the router's training step on CPU and on CUDA,
   same graphs and queries (``scripts/benchmark.py device=cpu compare_devices=[cuda]``, whose JSON holds
   both devices' figures and ``speedup_over_main_device``);
c. ``hage_full``: the full HAGE protocol (``scripts/train.py +experiment=hage_full``: 5 folds x 200
   epochs) on CUDA, its wall time from its ``results.json`` (goal: under 5 minutes on an H200);
d. ``parity``: ``scripts/evaluate.py`` for every policy on CPU and on CUDA over the same saved graph
   sets; the loaded node lists must be identical question by question and the summary metrics equal
   within ``--tolerance`` (:func:`compare_runs`).

The GPU machine has no network and lacks hydra-core/omegaconf (and the text stack). ``--prepare``, run
here, downloads the pure-Python wheels it needs into ``<wheels>``; the run step installs them offline
when hydra is missing. Carry ``outputs/graphs`` (saved graph sets with embeddings) and the wheels folder.

    python scripts/benchmarks/cuda_check.py --prepare                     # here, once: wheels into .cuda_wheels/
    python scripts/benchmarks/cuda_check.py --out "$OUT"                  # there: all stages
    python scripts/benchmarks/cuda_check.py --stages parity --device cpu --dry-run   # show the commands only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("tests", "benchmark", "hage_full", "parity")
POLICIES = ("beta_bfs", "dense_topk", "uniform_bfs", "ppr", "router", "gnn")
GPU_TESTS = (
    "tests/test_device.py",
    "tests/test_policies.py",
    "tests/test_graph_batch.py",
    "tests/test_walk_trainer.py",
    "tests/test_walk_router.py",
    "tests/test_gnn_reader.py",
    "tests/test_router.py",
)
WHEELS = ("hydra-core==1.3.8", "omegaconf==2.3.0", "antlr4-python3-runtime==4.9.3")
# summary metrics compared between devices (latency and wall time differ by design)
COMPARED = ("evidence_recall", "all_evidence_hit", "precision", "first_gold_rank", "loaded_tokens", "hops")


def stage_commands(stage: str, args) -> list[list[str]]:
    """The command lines of one stage (``python`` = this interpreter)."""
    py, graphs, dev = sys.executable, args.graphs, args.device
    sets = [p for p in (f"{graphs}/locomo", f"{graphs}/hotpotqa") if (Path(p) / "manifest.json").exists()]
    out = Path(args.out)
    if stage == "tests":
        return [[py, "-m", "pytest", "-m", "not slow", "-q", *GPU_TESTS]]
    if stage == "benchmark":
        return [
            [
                py,
                "scripts/benchmark.py",
                "device=cpu",
                f"compare_devices=[{dev}]",
                f"locomo.path={graphs}/locomo",
                f"datasets=[{','.join(sets)}]",
                "sizes=[1000,10000,100000]",
                "plot=false",
                f"out_dir={out}/benchmark",
            ]
        ]
    if stage == "hage_full":
        return [
            [
                py,
                "scripts/train.py",
                "+experiment=hage_full",
                f"graphset={graphs}/locomo",
                f"trainer.run.device={dev}",
                "logger=none",
                "progress=false",
                f"out_dir={out}/hage_full",
            ]
        ]
    if stage == "parity":
        # the router is compared with the first checkpoint the hage_full stage wrote (gnn needs a reader
        # checkpoint from train_gnn.py: its device parity is left to the tests stage)
        names = [p for p in POLICIES if p not in ("router", "gnn")]
        ckpt = sorted((out / "hage_full").rglob("best.pt"))
        router = ["policy=router", f"policy.checkpoint={ckpt[0]}"] if ckpt else []
        return [
            [
                py,
                "scripts/evaluate.py",
                f"graphset={gs}",
                f"policies=[{','.join(names + (['router'] if ckpt else []))}]",
                *router,
                f"device={d}",
                "sweep_tokens=[]",
                "logger=none",
                "progress=false",
                f"out_dir={out}/parity/{Path(gs).name}-{side}",
            ]
            for gs in sets
            for side, d in (("cpu", "cpu"), ("device", dev))
        ]
    raise ValueError(f"unknown stage {stage!r}; stages: {STAGES}")


def compare_runs(cpu_dir: Path, dev_dir: Path, tolerance: float) -> dict:
    """Compare two ``evaluate.py`` output folders: per policy, the questions whose loaded lists differ
    and the summary metrics that differ by more than ``tolerance``."""
    cpu, dev = (json.loads((d / "results.json").read_text())["policies"] for d in (cpu_dir, dev_dir))
    out = {}
    for policy in cpu:
        rows = [
            [json.loads(line) for line in (d / f"questions_{policy}.jsonl").read_text().splitlines() if line]
            for d in (cpu_dir, dev_dir)
        ]
        differ = [a["qid"] for a, b in zip(*rows) if a["qid"] != b["qid"] or a["loaded"] != b["loaded"]]
        metrics = {}
        for group, s in cpu[policy]["summary"].items():
            for key in COMPARED:
                a, b = s.get(key), dev[policy]["summary"].get(group, {}).get(key)
                if (a is None) != (b is None) or (a is not None and abs(a - b) > tolerance):
                    metrics[f"{group}/{key}"] = [a, b]
        out[policy] = {
            "questions": len(rows[0]),
            "loaded_lists_differ": differ[:20],
            "n_differ": len(differ) + abs(len(rows[0]) - len(rows[1])),
            "metrics_differ": metrics,
            "equal": not differ and len(rows[0]) == len(rows[1]) and not metrics,
        }
    return out


def run_stage(stage: str, args) -> dict:
    """Run one stage's commands (each under the stage's time limit) and collect its figures."""
    res: dict = {"commands": [" ".join(c) for c in stage_commands(stage, args)], "returncodes": []}
    if args.dry_run:
        return res
    t0 = time.perf_counter()
    for cmd in stage_commands(stage, args):
        try:
            done = subprocess.run(cmd, cwd=ROOT, timeout=args.stage_timeout, capture_output=True, text=True)
            res["returncodes"].append(done.returncode)
            res.setdefault("tail", []).append((done.stdout + done.stderr)[-3000:])
        except subprocess.TimeoutExpired:
            res["returncodes"].append("timeout")
            break
    res["wall_s"] = time.perf_counter() - t0
    out = Path(args.out)
    if stage == "hage_full" and (out / "hage_full" / "results.json").exists():
        train = json.loads((out / "hage_full" / "results.json").read_text())
        res["protocol_wall_s"] = train.get("wall_s")
        res["under_5_minutes"] = train.get("wall_s") is not None and train["wall_s"] < 300
    if stage == "benchmark" and (out / "benchmark" / "benchmark.json").exists():
        bench = json.loads((out / "benchmark" / "benchmark.json").read_text())
        res["speedups"] = {
            size: {p: r["on"][args.device]["speedup_over_main_device"] for p, r in e["policies"].items()}
            for size, e in bench["sizes"].items()
        }
        res["datasets"] = {
            name: {p: r["on"][args.device]["speedup_over_main_device"] for p, r in d["policies"].items()}
            for name, d in bench["datasets"].items()
        }
        res["train"] = bench.get("train")
    if stage == "parity":
        for gs in ("locomo", "hotpotqa"):
            a, b = out / "parity" / f"{gs}-cpu", out / "parity" / f"{gs}-device"
            if (a / "results.json").exists() and (b / "results.json").exists():
                res.setdefault("comparison", {})[gs] = compare_runs(a, b, args.tolerance)
    return res


def prepare(wheels: Path) -> None:
    """Download the pure-Python wheels the GPU machine lacks (run where the package index is reachable)."""
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels), *WHEELS]
    subprocess.run(cmd, check=True)


def ensure_packages(wheels: Path) -> None:
    """Install the carried wheels offline when hydra is missing here."""
    try:
        import hydra  # noqa: F401
    except ImportError:
        if not wheels.is_dir():
            raise SystemExit(f"hydra-core is not installed and {wheels} holds no wheels (run --prepare first)")
        pip = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), *WHEELS]
        subprocess.run(pip, check=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, read with argparse alone: ``graphmem.config.entry`` needs hydra, which this script
    installs on the GPU machine (:func:`ensure_packages`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", help="download the wheels and stop")
    parser.add_argument("--wheels", default=str(ROOT / ".cuda_wheels"))
    parser.add_argument("--out", default=os.environ.get("OUT", "outputs/cuda_check"))
    parser.add_argument("--graphs", default="outputs/graphs", help="folder holding the saved graph sets")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--device", default="cuda", help="the device compared with the CPU")
    parser.add_argument("--stage-timeout", type=float, default=300.0, help="seconds per command")
    parser.add_argument("--tolerance", type=float, default=1e-6, help="largest allowed metric difference")
    parser.add_argument("--dry-run", action="store_true", help="write the commands, run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.prepare:
        prepare(Path(args.wheels))
        return {}
    if not args.dry_run:
        import torch

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise SystemExit(f"device {args.device!r}: CUDA is not available on this machine")
        ensure_packages(Path(args.wheels))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": args.device, "stages": {}}
    for stage in args.stages:
        report["stages"][stage] = run_stage(stage, args)
        (out / "cuda_check.json").write_text(json.dumps(report, indent=2, default=str))
        print(f"{stage}: {json.dumps({k: v for k, v in report['stages'][stage].items() if k != 'tail'})}", flush=True)
    return report


if __name__ == "__main__":
    main()
