"""Dense, BM25 and hybrid retrieval on every set, and walks from hybrid entries: runs scripts/evaluate.py, writes JSON.

    python scripts/studies/lexical_baselines/run.py --sets locomo hotpotqa musique musique-pooled hotpotqa-pooled \\
        --walk-set locomo --out docs/results

For each set of ``--sets`` (a saved graph set under ``--graphs``) one ``scripts/evaluate.py`` run
evaluates ``dense_topk``, ``bm25`` and ``hybrid`` on the default budget; for ``--walk-set`` one run
evaluates ``beta_bfs`` and ``ppr`` with their default (embedding) entries and one run per walk with
``policy.entry_selector=hybrid``. Each run writes its per-question rows; the paired differences
(``hybrid - dense_topk``, ``hybrid - bm25``, ``bm25 - dense_topk``; each walk with hybrid entries
minus the same walk with embedding entries) come from those rows through
:func:`graphmem.eval.stats.paired_comparison` on the questions of the ``overall`` group, with a
10,000-resample bootstrap CI and the paired t-test. Writes ``<out>/lexical_baselines.json`` and
``<out>/lexical_baselines_walks.json``, each with the command and every evaluate command run.

With ``--select-sets`` it instead chooses the hybrid's ``candidates`` on training sets (built from
the HotpotQA train sample into ``--select-graphs``): ``hybrid`` with each of ``--depths`` per set,
the depth of the best mean evidence recall (ties: the smaller), written to
``<out>/lexical_baselines_selection.json``::

    python scripts/studies/lexical_baselines/run.py --select-sets hotpotqa hotpotqa-pooled --out docs/results
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.eval.metrics import in_overall
from graphmem.eval.stats import paired_comparison
from graphmem.store.io import write_json
from graphmem.store.paths import PathNameError, check_name, run_path

ROOT = Path(__file__).resolve().parents[3]
METRICS = ("evidence_recall", "all_evidence_hit", "support_sentence_recall", "support_paragraph_recall")
FLAT = ("dense_topk", "bm25", "hybrid")
PAIRS = (("hybrid", "dense_topk"), ("hybrid", "bm25"), ("bm25", "dense_topk"))
WALKS = ("beta_bfs", "ppr")
COMMON = ["logger=none", "latency=batch", "sweep_tokens=[]", "progress=false", "stats.reference=null"]


def evaluate(graphset: Path, out_dir: Path, overrides: list[str], dry: bool = False) -> str:
    """Run scripts/evaluate.py on ``graphset`` into ``out_dir`` (``dry``: only say how); returns the command."""
    args = [f"graphset={graphset}", *overrides, *COMMON, f"out_dir={out_dir}"]
    if not dry:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "evaluate.py"), *args], check=True, cwd=ROOT)
    return "python scripts/evaluate.py " + " ".join(f"'{a}'" if "[" in a or "{" in a else a for a in args)


def rows(out_dir: Path, policy: str) -> dict[str, dict]:
    """The ``overall`` questions of a run's ``questions_<policy>.jsonl``, by question id."""
    lines = (out_dir / f"questions_{policy}.jsonl").read_text(encoding="utf-8").splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    return {r["qid"]: r for r in found if in_overall(r.get("category", ""))}


def paired(a: dict[str, dict], b: dict[str, dict], name_a: str, name_b: str) -> dict[str, dict]:
    """``a - b`` per metric: both means, the mean difference, its 95% CI, the p-value and n."""
    out = {}
    for metric in METRICS:
        c = paired_comparison(
            name_a,
            {q: r["metrics"].get(metric) for q, r in a.items()},
            name_b,
            {q: r["metrics"].get(metric) for q, r in b.items()},
            metric,
        )
        if c is not None:  # a metric the set defines
            out[metric] = {k: v for k, v in c.to_json().items() if k not in ("policy", "reference", "metric")}
    return out


def means(r: dict[str, dict]) -> dict[str, float]:
    """Each metric's mean over the questions that define it, and ``n``: those scored for evidence recall."""
    out: dict[str, float] = {}
    for m in METRICS:
        values = [x["metrics"][m] for x in r.values() if x["metrics"].get(m) is not None]
        if values:
            out[m] = sum(values) / len(values)
    return out | {"n": sum(x["metrics"].get("evidence_recall") is not None for x in r.values())}


def select(sets: list[str], graphs: Path, runs: Path, depths: list[int], reuse: bool) -> dict:
    """``hybrid`` with each ``candidates`` of ``depths`` on each training set: mean evidence recall per depth."""
    out: dict = {"sets": {}, "reused": reuse}
    for name in sets:
        out["sets"][name] = {}
        for depth in depths:
            run = run_path(runs, "select", f"{name}-c{depth}", key="--runs")
            overrides = ["policy=hybrid", f"policy.candidates={depth}"]
            done = reuse and (run / "results.json").is_file()
            command = evaluate(graphs / name, run, overrides, dry=done)
            out["sets"][name][str(depth)] = {"evaluate": command, "means": means(rows(run, "hybrid"))}
    recall = {d: [out["sets"][s][str(d)]["means"]["evidence_recall"] for s in sets] for d in depths}
    out["mean_evidence_recall"] = {str(d): sum(v) / len(v) for d, v in recall.items()}
    out["chosen"] = max(depths, key=lambda d: (out["mean_evidence_recall"][str(d)], -d))
    return out


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets", nargs="*", default=["locomo", "hotpotqa", "musique", "musique-pooled", "hotpotqa-pooled"]
    )
    parser.add_argument("--walk-set", default="locomo")
    parser.add_argument("--graphs", type=Path, default=Path("outputs/graphs"))
    parser.add_argument("--runs", type=Path, default=Path("outputs/lexical_baselines"))
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--select-sets", nargs="*", default=[], help="training sets to choose candidates on")
    parser.add_argument("--select-graphs", type=Path, default=Path("outputs/graphs-train"))
    parser.add_argument("--depths", nargs="*", type=int, default=[6, 12, 24, 48, 100])
    parser.add_argument("--reuse", action="store_true", help="selection: keep runs whose results.json exists")
    return parser


def work(args: argparse.Namespace) -> None:
    set_threads(None)  # $OMP_NUM_THREADS, else one thread (graphmem.config.cli.set_threads)
    try:  # every set name becomes a run folder under --runs
        for key, names in (("--sets", args.sets), ("--select-sets", args.select_sets), ("--walk-set", [args.walk_set])):
            for name in names:
                check_name(key, name)
    except PathNameError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    command = " ".join(["python", Path(__file__).resolve().relative_to(ROOT).as_posix(), *sys.argv[1:]])
    if args.select_sets:
        chosen = select(args.select_sets, args.select_graphs, args.runs, args.depths, args.reuse)
        write_json(args.out / "lexical_baselines_selection.json", {"command": command, **chosen}, indent=2)
        print("chosen candidates:", chosen["chosen"], json.dumps(chosen["mean_evidence_recall"]))
        return

    flat = {"command": command, "sets": {}}
    for name in args.sets:
        out = run_path(args.runs, name, key="--runs")
        run = evaluate(args.graphs / name, out, [f"policies=[{','.join(FLAT)}]"])
        per = {p: rows(out, p) for p in FLAT}
        flat["sets"][name] = {
            "evaluate": run,
            "means": {p: means(r) for p, r in per.items()},
            "paired": {f"{a} - {b}": paired(per[a], per[b], a, b) for a, b in PAIRS},
        }
        print(name, json.dumps(flat["sets"][name]["means"]), flush=True)
    write_json(args.out / "lexical_baselines.json", flat, indent=2)

    walks = {"command": command, "set": args.walk_set, "walks": {}}
    graphset = args.graphs / args.walk_set
    base = run_path(args.runs, f"{args.walk_set}-walks", key="--runs")
    base_run = evaluate(graphset, base, [f"policies=[{','.join(WALKS)}]"])
    for walk in WALKS:
        out = run_path(args.runs, f"{args.walk_set}-{walk}-hybrid", key="--runs")
        run = evaluate(graphset, out, [f"policy={walk}", "policy.entry_selector=hybrid"])
        a, b = rows(out, walk), rows(base, walk)
        walks["walks"][walk] = {
            "evaluate": {"embedding entries": base_run, "hybrid entries": run},
            "means": {"embedding entries": means(b), "hybrid entries": means(a)},
            "paired": {"hybrid entries - embedding entries": paired(a, b, "hybrid entries", "embedding entries")},
        }
        print(walk, json.dumps(walks["walks"][walk]["means"]), flush=True)
    write_json(args.out / "lexical_baselines_walks.json", walks, indent=2)


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
