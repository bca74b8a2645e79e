"""The multi-hop ranking study: the trained walk, its load order, its ablations, the GNN reader and the simple
baselines on the pooled passage corpora; runs scripts/evaluate.py per set and policy, writes one JSON.

    python scripts/studies/multihop/run.py --walk outputs/train/multihop/fold0/router/best.pt \\
        --gnn outputs/gnn/multihop/gnn.pt --sets hotpotqa-pooled musique-pooled --out docs/results

For each set of ``--sets`` (a saved graph set under ``--graphs``; with ``--questions-of SET=RUN_DIR``, a set of
per-question graphs cut to the questions that a ``scripts/train.py`` run tested, ``evaluate.py graphs=``: the
2Wiki questions of the walk's held-out pool) one ``scripts/evaluate.py`` run per configuration, each into its
own folder ``<runs>/<set>/<run>`` (a router run's rows are always
``questions_router.jsonl``): the walk ranked by its head (``policy=router policy.checkpoint=<walk>``), the
same walk in load order (``policy.rank=false``, reported as ``<walk>_load_order``), each ``--extra-walk
NAME=PATH`` (ranked), the GNN reader (``policy=gnn``) when ``--gnn`` is given, and one run of the
baselines ``hybrid``, ``bm25`` and ``dense_topk``. From the per-question rows of the ``overall`` group:
each policy's means of :data:`METRICS` (each over the questions that define it; ``None`` where none
does) and its number of questions, and paired differences ``d_i = a_i - b_i``
(:func:`graphmem.eval.stats.compare_policies`: mean, percentile bootstrap CI, paired t-test p, n) of
every policy against ``hybrid``, of ``<walk> - <walk>_load_order`` (what the ranking head adds), of
``<walk> - gnn`` and of each ablation against the walk. Every policy of a set must have scored the
same questions. A checkpoint run refuses a set holding a graph its checkpoint was trained or selected on
(``policy.strict_split=true``).

Writes ``<out>/multihop.json`` (atomically): the command, every evaluate command, each checkpoint's
path and SHA-256 and, where its training run's folder (the checkpoint's folder or one of the two above
it) holds ``results.json`` (else ``run.json``), the sets it was trained on. ``--dry-run`` prints the
evaluate commands and runs nothing. ``python scripts/make_docs.py`` renders ``docs/multihop.md`` from it.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.core.errors import InputError
from graphmem.eval.metrics import in_overall, mean
from graphmem.eval.runs import question_rows, results_file, shell_word
from graphmem.eval.stats import compare_policies
from graphmem.store.checkpoint import load_checkpoint
from graphmem.store.io import read_json, write_json
from graphmem.store.paths import PathNameError, check_name, run_path
from graphmem.store.setstore import file_sha256

ROOT = Path(__file__).resolve().parents[3]
RESULTS = "multihop.json"
METRICS = ("passage_recall_2", "passage_recall_5", "support_paragraph_recall", "evidence_recall", "chain_following")
REFERENCE = "hybrid"
BASELINES = ("hybrid", "bm25", "dense_topk")
COMMON = ["logger=none", "latency=batch", "sweep_tokens=[]", "progress=false", "stats.reference=null"]
"""every evaluate run: no tracking, batched latency, no budget sweep; the study pairs the rows itself"""

Runner = Callable[[list[str]], None]


@dataclass
class Run:
    """One scripts/evaluate.py run on one set: its folder name, its overrides, and the policies it
    reports (study name -> the name its rows carry, ``questions_<name>.jsonl``)."""

    name: str
    overrides: list[str]
    policies: dict[str, str] = field(default_factory=dict)


@dataclass
class Checkpoint:
    """A checkpoint the study evaluates: its study name, role (``walk``, ``ablation``, ``gnn``) and file."""

    name: str
    role: str
    path: Path

    @property
    def kind(self) -> str:
        return "gnn" if self.role == "gnn" else "walk"


def shown(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it, else absolute."""
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def plan_runs(checkpoints: list[Checkpoint], device: str | None) -> list[Run]:
    """The evaluate runs of one set, in report order: walk, its load order, ablations, gnn, baselines."""
    runs = []
    for c in checkpoints:
        policy = "gnn" if c.role == "gnn" else "router"
        base = [f"policy={policy}", f"policy.checkpoint={shown(c.path)}", "policy.strict_split=true"]
        runs.append(Run(c.name, base, {c.name: policy}))
        if c.role == "walk":
            load_order = f"{c.name}_load_order"
            runs.append(Run(load_order, [*base, "policy.rank=false"], {load_order: "router"}))
    runs.append(Run("baselines", [f"policies=[{','.join(BASELINES)}]"], {p: p for p in BASELINES}))
    for run in runs:
        run.overrides += [f"device={device}"] if device else []
    return runs


def evaluate_command(graphset: Path, out_dir: Path, run: Run) -> list[str]:
    """The scripts/evaluate.py command of ``run`` on ``graphset`` into ``out_dir``."""
    args = [f"graphset={shown(graphset)}", *run.overrides, *COMMON, f"out_dir={shown(out_dir)}"]
    return [sys.executable, str(ROOT / "scripts" / "evaluate.py"), *args]


def command_text(cmd: list[str]) -> str:
    """``cmd`` as the line one would type from the repository root."""
    return " ".join(["python", shown(Path(cmd[1])), *(shell_word(a) for a in cmd[2:])])


def run_subprocess(cmd: list[str]) -> None:
    """Run ``cmd`` from the repository root; a failed run stops the study naming the command."""
    done = subprocess.run(cmd, cwd=ROOT)
    if done.returncode != 0:
        raise InputError(f"{command_text(cmd)} exited with status {done.returncode}")


def overall_rows(out_dir: Path, policy: str) -> dict[str, dict]:
    """The ``overall`` questions of a run's ``questions_<policy>.jsonl``, by question id (each once)."""
    found: dict[str, dict] = {}
    for r in question_rows(out_dir, policy):
        if r["qid"] in found:
            raise InputError(f"{out_dir / f'questions_{policy}.jsonl'}: question {r['qid']!r} appears twice")
        if in_overall(r.get("category", "")):
            found[r["qid"]] = r
    return found


def policy_means(rows: dict[str, dict]) -> dict[str, Any]:
    """Each metric's mean over the questions that define it (``None`` where none does), and ``questions``."""
    means = {m: mean(r["metrics"].get(m) for r in rows.values()) for m in METRICS}
    return {"means": means, "questions": len(rows)}


def pairs(walk: str, checkpoints: list[Checkpoint], policies: list[str]) -> list[tuple[str, str]]:
    """Every policy against the reference, then the walk against its load order and the gnn, and each
    ablation against the walk (``(a, b)`` read as ``a - b``)."""
    out = [(p, REFERENCE) for p in policies if p != REFERENCE]
    out.append((walk, f"{walk}_load_order"))
    out += [(walk, c.name) for c in checkpoints if c.role == "gnn"]
    out += [(c.name, walk) for c in checkpoints if c.role == "ablation"]
    return out


def paired(rows: dict[str, dict[str, dict]], todo: list[tuple[str, str]], n_boot: int) -> list[dict[str, Any]]:
    """``a - b`` on each metric of :data:`METRICS` the rows define, for every pair of ``todo``."""
    out = []
    for a, b in todo:
        pair = {a: list(rows[a].values()), b: list(rows[b].values())}
        out += [c.to_json() for c in compare_policies(pair, b, metrics=METRICS, n_boot=n_boot)]
    return out


def same_questions(name: str, rows: dict[str, dict[str, dict]]) -> None:
    """Refuse a set whose policies scored different questions (the paired tables would pair subsets)."""
    first, *rest = rows
    for policy in rest:
        differ = set(rows[policy]) ^ set(rows[first])
        if differ:
            raise InputError(
                f"set {name}: {policy!r} and {first!r} scored different questions ({len(differ)} differ, "
                f"e.g. {sorted(differ)[0]!r}): rerun both on one graph set"
            )


def held_out_graphs(name: str, run_dir: Path, runs_dir: Path) -> list[str]:
    """The overrides restricting set ``name`` (per-question graphs, each named by its question id) to the questions
    a training run tested (``<run_dir>/questions_router.jsonl``): ``graphs=<runs>/<name>/graphs.json``."""
    qids = sorted({r["qid"] for r in question_rows(run_dir, "router")})
    path = write_json(run_path(runs_dir, name, "graphs.json", key="--runs"), {"test": qids})
    return [f"graphs={shown(path)}", "graphs_part=test"]


def study_set(name: str, graphset: Path, runs_dir: Path, runs: list[Run], runner: Runner | None, n_boot: int, only=()):
    """Evaluate every run of one set (``runner`` None: only the commands) and its results entry; ``only``: overrides
    restricting its graphs (:func:`held_out_graphs`)."""
    commands, folders = {}, {}
    for run in runs:
        folders[run.name] = run_path(runs_dir, name, run.name, key="--runs")
        cmd = evaluate_command(graphset, folders[run.name], Run(run.name, [*run.overrides, *only], run.policies))
        commands[run.name] = command_text(cmd)
        if runner is None:
            print(commands[run.name])
        else:
            runner(cmd)
    if runner is None:
        return None
    rows = {p: overall_rows(folders[run.name], own) for run in runs for p, own in run.policies.items()}
    same_questions(name, rows)
    dataset = (results_file(folders["baselines"], "evaluate.py").get("meta") or {}).get("dataset")
    return {
        "graphset": shown(graphset),
        "dataset": dataset,
        "graphs": only[0].split("=", 1)[1] if only else None,
        "evaluate": commands,
        "policies": {p: {"run": run.name, **policy_means(rows[p])} for run in runs for p in run.policies},
        "rows": rows,
    }


def main(argv: list[str] | None = None, runner: Runner = run_subprocess) -> int:
    """The study's command line (module docstring); 0 when written, 2 with one ``error:`` line on bad input."""
    return command(arguments(), functools.partial(work, argv=argv, runner=runner), argv, errors=(PathNameError,))


def work(args: argparse.Namespace, argv: list[str] | None, runner: Runner) -> int:
    """Plan the evaluate runs (``--dry-run``: print them), run them and write ``multihop.json``."""
    if args.n_boot < 1:
        raise ValueError(f"--n-boot must be a positive integer, got {args.n_boot}")
    args.argv = argv
    set_threads(None)  # $OMP_NUM_THREADS, else one thread (graphmem.config.cli.set_threads)
    checkpoints = study_checkpoints(args)
    runs = plan_runs(checkpoints, args.device)
    if args.dry_run:
        for name in args.sets:
            study_set(name, args.graphs / name, args.runs, runs, None, args.n_boot, restrict(args, name))
        return 0
    payload = study(args, checkpoints, runs, runner)
    path = write_json(args.out / RESULTS, payload, indent=2)
    print(f"wrote {shown(path)}")
    return 0


def study(args: argparse.Namespace, checkpoints: list[Checkpoint], runs: list[Run], runner: Runner) -> dict:
    """Check the checkpoints, evaluate every set and pair its rows: the payload of ``multihop.json``."""
    started = time.perf_counter()
    for name in args.sets:  # evaluate.py would build a set that is not there from its own data config
        if not (args.graphs / name / "manifest.json").is_file():
            raise InputError(
                f"--sets {name}: no saved graph set at {args.graphs / name} (build it: python scripts/build_graph.py "
                f"data=<dataset> graphset={args.graphs / name}, or pass --graphs)"
            )
    described = {c.name: describe_checkpoint(c) for c in checkpoints}  # damaged files stop before any run
    sets = {}
    for name in args.sets:
        entry = study_set(name, args.graphs / name, args.runs, runs, runner, args.n_boot, restrict(args, name))
        rows = entry.pop("rows")
        entry["paired"] = paired(rows, pairs(args.walk_name, checkpoints, list(rows)), args.n_boot)
        sets[name] = entry
        print(name, json.dumps({p: v["means"] for p, v in entry["policies"].items()}), flush=True)
    argv = sys.argv[1:] if args.argv is None else args.argv
    return {
        "command": " ".join(["python", "scripts/studies/multihop/run.py", *(shell_word(a) for a in argv)]),
        "walk": args.walk_name,
        "reference": REFERENCE,
        "metrics": list(METRICS),
        "n_boot": args.n_boot,
        "checkpoints": described,
        "sets": sets,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def restrict(args: argparse.Namespace, name: str) -> list[str]:
    """The overrides restricting set ``name`` to a training run's test questions (``--questions-of``), or none."""
    for item in args.questions_of:
        which, sep, run_dir = item.partition("=")
        if not sep or not which or not run_dir:
            raise InputError(f"--questions-of {item!r}: expected SET=RUN_DIR (a scripts/train.py out_dir)")
        if which == name:
            return held_out_graphs(name, Path(run_dir), args.runs)
    return []


def study_checkpoints(args: argparse.Namespace) -> list[Checkpoint]:
    """The walk, the ablations (``NAME=PATH``) and the gnn, their names checked and distinct."""
    found = [Checkpoint(args.walk_name, "walk", args.walk)]
    for item in args.extra_walk:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--extra-walk {item!r}: expected NAME=PATH (e.g. no_head=outputs/.../best.pt)")
        found.append(Checkpoint(name, "ablation", Path(path)))
    if args.gnn is not None:
        found.append(Checkpoint("gnn", "gnn", args.gnn))
    names = [c.name for c in found] + [f"{args.walk_name}_load_order", *BASELINES, "baselines"]
    for c in found:
        check_name("--walk-name" if c.role == "walk" else "--extra-walk", c.name)
    taken = sorted({n for n in names if names.count(n) > 1})
    if taken:
        raise InputError(f"policy names used twice: {taken} (--walk-name, --extra-walk and gnn, baselines)")
    for name in args.sets:
        check_name("--sets", name)
    return found


def describe_checkpoint(c: Checkpoint) -> dict[str, Any]:
    """The checkpoint's role, path, file SHA-256, run id and what its training run recorded of its data."""
    state = load_checkpoint(c.path, c.kind)  # refuses a missing, damaged or wrong-kind file in one line
    run_id = state.get("run_id")
    inputs = state.get("inputs") or {}
    return {
        "role": c.role,
        "kind": c.kind,
        "path": shown(c.path),
        "sha256": file_sha256(c.path),
        "run_id": run_id,
        "rank_head": None if c.kind == "gnn" else state.get("rank_head") is not None,
        "train_graphs": len(inputs.get("train_graphs") or []),
        "val_graphs": len(inputs.get("val_graphs") or []),
        "training": training_record(c.path, run_id),
    }


def training_record(path: Path, run_id: str | None) -> dict[str, Any] | None:
    """What the training run of checkpoint ``path`` recorded of its data: its folder (the nearest of the
    checkpoint's folder and the two above it holding ``results.json``, else ``run.json``), the main set and
    every training-only set; ``same_run`` says whether that folder's run id is the checkpoint's."""
    folders = list(Path(path).resolve().parents)[:3]
    for name in ("results.json", "run.json"):
        folder = next((f for f in folders if (f / name).is_file()), None)
        if folder is None:
            continue
        record = read_json(folder / name)  # one line naming the file when unreadable
        config = record.get("config") or {}
        data = (record.get("graphset") or {}).get("data") or config.get("data") or {}
        return {
            "folder": shown(folder),
            "file": name,
            "run_id": record.get("run_id"),
            "same_run": None if run_id is None or record.get("run_id") is None else record["run_id"] == run_id,
            "dataset": record.get("dataset") or data.get("name"),
            "data": {k: data.get(k) for k in ("name", "file", "pooled", "pool_size", "limit", "sha256")},
            "folds": record.get("folds") or (config.get("cv") or {}).get("folds"),
            "train_sets": [train_set(s) for s in record.get("train_sets", config.get("train_sets")) or []],
        }
    return None


def train_set(item: dict[str, Any]) -> dict[str, Any]:
    """A training-only set as results.json records it (``run.json``'s config item: no counts, no digest)."""
    keys = ("key", "name", "file", "pooled", "pool_size", "limit", "sha256", "graphs", "questions")
    return {k: item.get(k) for k in keys}


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--walk", type=Path, required=True, help="the walk: <out_dir>/fold0/router/best.pt")
    parser.add_argument("--walk-name", default="multihop", help="the walk's name in the tables")
    parser.add_argument("--extra-walk", action="append", default=[], metavar="NAME=PATH", help="an ablation, ranked")
    parser.add_argument("--gnn", type=Path, default=None, help="the GNN reader (scripts/train_gnn.py checkpoint)")
    parser.add_argument("--sets", nargs="+", default=["hotpotqa-pooled", "musique-pooled"])
    parser.add_argument("--graphs", type=Path, default=Path("outputs/graphs"), help="where the saved sets lie")
    parser.add_argument("--runs", type=Path, default=Path("outputs/multihop_study"), help="the evaluate runs")
    parser.add_argument("--out", type=Path, default=Path("docs/results"), help="where multihop.json goes")
    parser.add_argument(
        "--questions-of",
        action="append",
        default=[],
        metavar="SET=RUN_DIR",
        help="evaluate SET (per-question graphs) on the questions a scripts/train.py run tested only",
    )
    parser.add_argument("--device", default=None, help="evaluate's device= for every run (default: each policy's)")
    parser.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples of each paired CI")
    parser.add_argument("--dry-run", action="store_true", help="print the evaluate commands; run nothing")
    return parser


if __name__ == "__main__":
    sys.exit(main())
