"""Trainings that diverge or die, results that would mix runs or overwrite one, questions without bound: each case
as a user meets it.

    python scripts/reliability/results_and_training.py      # writes docs/results/reliability_results_and_training.json
    python scripts/reliability/results_and_training.py --out /tmp/cases.json

Builds a small LoCoMo set (three conversations, hashing encoder) and a second one from a copy of the data file
whose questions read otherwise (same ids), trains a router for one fold and runs each case as its own process:
a training whose loss goes infinite, a NaN checkpoint, a killed training's ``best.pt``, runs of other data or
settings merged or compared, ``--out`` over an input, a killed evaluation's leftovers, a hand-edited paired
difference, the test file under renamed ids as a training set, a judge replying ``1e308``, deeply nested JSON,
settings out of range, questions of 10^5 and 2.6 x 10^5 words, ties of the bounded hybrid and killed forced
rebuilds. Each record keeps the command (temporary paths as ``<set>``, ``<other>`` and ``<tmp>``), the exit
status, the outcome (the first ``error:`` line, else what the case checked afterwards) and the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from case_runs import out_arguments, outcome, save_locomo_set, write_cases

from graphmem.config.entry import command
from graphmem.datasets.paths import data_file
from graphmem.store.checkpoint import load_checkpoint, save_checkpoint
from graphmem.store.io import write_json

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["logger=none", "progress=false"]
EVAL = [*QUIET, "sweep_tokens=[]", "latency=batch", "stats.n_boot=200"]
TRAIN = [*QUIET, "cv.k=3", "baselines=[dense_topk]", "stats.reference=dense_topk", "stats.n_boot=100"]
TRAIN += ["trainer.run.device=cpu", "trainer.objective.rl_epochs=0", "trainer.rank.epochs=0"]
RESULTS = "scripts/results.py"
TIES = """
import torch
from graphmem.builders.synthetic import make_text_graph, text_queries
from graphmem.core import Budget, Query
from graphmem.policies.hybrid import HybridEntrySelector
g = make_text_graph(600, dim=16, seed=5)
g.embeddings[:, 0] = 0.0
q = torch.zeros(16); q[0] = 1.0
qs = [Query(x.qid, x.text, q) for x in text_queries(g, 8, seed=8)]
a, b = (HybridEntrySelector(min_nodes=m).rank(g, qs, Budget()) for m in (0, 16384))
print(f"queries ranked alike by the bounded and exact paths: {sum(x == y for x, y in zip(a, b))} of {len(qs)}")
"""
KILLED_REBUILDS = """
import sys
from pathlib import Path
from graphmem.builders import DataConfig, GraphConfig
from graphmem.builders.pipeline import reuse_or_build
from graphmem.store.graphset import GraphSet
folder, graph = Path(sys.argv[1]), GraphConfig(encoder="hashing", cache_dir=sys.argv[2])
reuse_or_build(DataConfig(name="locomo", limit=1), graph, folder, progress=False)
def killed(self, *args, **kwargs):
    raise KeyboardInterrupt  # the build dies after keeping the old set aside, before its commit
GraphSet.save = killed
for _ in range(3):
    try:
        reuse_or_build(DataConfig(name="locomo", limit=1, file=sys.argv[3]), graph, folder, progress=False, force=True)
    except KeyboardInterrupt:
        pass
kept = sorted(p.name for p in folder.glob("replaced-*"))
print(f"3 forced rebuilds killed before their commit; copies of the old set kept: {len(kept)}")
"""


class Cases:
    """Runs each case as ``python <script> <args>`` and keeps its record."""

    def __init__(self, tmp: Path):
        self.tmp, self.records = tmp, []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        self.env["GRAPHMEM_CACHE_DIR"] = str(tmp / "cache")

    def shown(self, text: str) -> str:
        for path, label in ((self.tmp / "set", "<set>"), (self.tmp / "other", "<other>"), (self.tmp, "<tmp>")):
            text = text.replace(str(path), label)
        return re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "<run id>", text)

    def run(self, case: str, argv: list[str], after: Callable[[], str] | None = None, shown: str = "") -> None:
        hydra = [] if argv[0] in (RESULTS, "scripts/make_docs.py", "-c") else [f"hydra.run.dir={self.tmp}/hydra"]
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, *argv, *hydra], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=1800
        )
        seconds = time.perf_counter() - t0
        text = outcome((proc.stderr + proc.stdout).splitlines(), after)
        command = shown or " ".join(["python", *argv])
        record = {"case": case, "command": self.shown(command), "exit_code": proc.returncode}
        self.records.append({**record, "outcome": self.shown(text.split("] - ", 1)[-1]), "seconds": round(seconds, 1)})
        print(f"{proc.returncode:3d}  {seconds:6.1f}s  {case}: {text[:150]}", flush=True)


def locomo_copy(out: Path, limit: int, edit: Callable[[list], None]) -> Path:
    """The first ``limit`` LoCoMo conversations, changed by ``edit``, written to ``out``."""
    conversations = json.loads(data_file("locomo/locomo_dev8.json").read_text(encoding="utf-8"))[:limit]
    edit(conversations)
    write_json(out, conversations, indent=None)
    return out


def reworded(conversations: list) -> None:
    for c in conversations:
        for q in c["qa"]:
            q["question"] = "In other words: " + q["question"]


def renamed(conversations: list) -> None:
    for c in conversations:
        c["sample_id"] = "renamed-" + c["sample_id"]


def long_question(words: int) -> Callable[[list], None]:
    def edit(conversations: list) -> None:
        text = conversations[0]["conversation"]["session_1"][0]["text"].split()
        conversations[0]["qa"][0]["question"] = " ".join(text[i % len(text)] for i in range(words)) + "?"

    return edit


def killed_training(c: Cases, out: Path) -> None:
    """A training SIGKILLed as soon as its first best.pt is written."""
    argv = [f"graphset={c.tmp / 'set'}", *TRAIN, "cv.folds=[0]", "trainer.objective.imitation_epochs=40"]
    proc = subprocess.Popen(
        [sys.executable, "scripts/train.py", *argv, f"out_dir={out}", f"hydra.run.dir={c.tmp}/hydra-killed"],
        cwd=ROOT,
        env=c.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 900
    while not (out / "fold0" / "router" / "best.pt").is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def training_cases(c: Cases) -> None:
    """Divergence, checkpoints that are no result, the ranking head's settings, a judge's odd replies."""
    s, tmp = f"graphset={c.tmp / 'set'}", c.tmp

    def wrote(d: str) -> Callable[[], str]:
        folder = tmp / d
        return lambda: (
            f"best.pt written: {(folder / 'fold0' / 'router' / 'best.pt').exists()}; "
            f"results.json written: {(folder / 'results.json').exists()}"
        )

    one = ["scripts/train.py", s, *TRAIN, "cv.folds=[0]", "trainer.objective.imitation_epochs=1"]
    c.run(
        "a training whose loss goes infinite (trainer.objective.temperature=1e-45)",
        [*one, "trainer.objective.temperature=1e-45", f"out_dir={tmp / 'diverged'}"],
        after=wrote("diverged"),
    )
    c.run("trainer.optim.lr=1e20", [*one, "trainer.optim.lr=1e20", f"out_dir={tmp / 'bad'}"])
    c.run("trainer.optim.rl_lr=1e38", [*one, "trainer.optim.rl_lr=1e38", f"out_dir={tmp / 'bad'}"])
    c.run(
        "trainer.rank.residual=bogus with trainer.rank.epochs=0",
        [*one, "trainer.rank.residual=bogus", f"out_dir={tmp / 'bad'}"],
    )
    judge = ["trainer.objective.reward=judge", "+trainer.objective.judge.model=gpt-4o-mini"]
    judge += ["+trainer.objective.judge.max_retries=0", "+trainer.objective.judge.cache_dir=null"]
    c.run(
        "judge reward, every judge reply 1e308",
        [*one, "trainer.objective.imitation_epochs=0", "trainer.objective.rl_epochs=1", *judge]
        + ["+trainer.objective.judge.mock_response='1e308'", f"out_dir={tmp / 'judge'}"],
        after=wrote("judge"),
    )
    best = tmp / "run" / "fold0" / "router" / "best.pt"
    state = load_checkpoint(best, "walk")
    scorer = state["scorer"]
    scorer["state_dict"] = {
        k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in scorer["state_dict"].items()
    }
    keep = {k: v for k, v in state.items() if k not in ("format", "kind", "inputs", "sha256")}
    save_checkpoint(tmp / "nan.pt", "walk", keep, state["inputs"])  # checksum restamped
    router = [s, *EVAL, "policies=[router]", "policy=router", "policy.device=cpu"]
    c.run(
        "router best.pt whose scorer is all NaN, checksum restamped",
        ["scripts/evaluate.py", *router, f"policy.checkpoint={tmp / 'nan.pt'}", f"out_dir={tmp / 'o-nan'}"],
    )
    killed = tmp / "killed-run"
    killed_training(c, killed)
    c.run(
        "the best.pt of a training killed (SIGKILL) after its first epoch",
        [
            "scripts/evaluate.py",
            *router,
            f"policy.checkpoint={killed / 'fold0/router/best.pt'}",
            f"out_dir={tmp / 'o-k'}",
        ],
    )
    fresh = load_checkpoint(best, "walk")
    keep = {k: v for k, v in fresh.items() if k not in ("format", "kind", "inputs", "sha256")}
    save_checkpoint(tmp / "no-inputs.pt", "walk", keep, None)
    c.run(
        "policy.strict_split=true with a checkpoint that records no inputs",
        ["scripts/evaluate.py", *router, f"policy.checkpoint={tmp / 'no-inputs.pt'}", "policy.strict_split=true"]
        + [f"out_dir={tmp / 'o-strict'}"],
    )
    c.run(
        "an evaluation into a training run's fold0/router/",
        ["scripts/evaluate.py", s, *EVAL, "policies=[beta_bfs]", f"out_dir={tmp / 'run' / 'fold0' / 'router'}"],
        after=lambda: f"files there besides checkpoints: {len(beside_checkpoints(tmp / 'run/fold0/router'))}",
    )


def beside_checkpoints(folder: Path) -> list[str]:
    """The files of a checkpoint folder other than the checkpoints and their artifact records."""
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".pt" and not p.name.endswith(".artifact.json"))


def results_cases(c: Cases) -> None:
    """Runs of other data or settings merged or compared, outputs over inputs, leftovers of killed runs."""
    tmp = c.tmp
    f0, f1_other, f1_lr = tmp / "folds" / "f0", tmp / "folds" / "f1-other", tmp / "folds" / "f1-lr"
    merge = [RESULTS, "merge", "--n-boot", "200"]
    c.run(
        "merge: fold runs of two data files (same ids, other questions)",
        [*merge, str(f0), str(f1_other), "--out", str(tmp / "m1.json")],
    )
    c.run("merge: fold runs of two learning rates", [*merge, str(f0), str(f1_lr), "--out", str(tmp / "m2.json")])
    c.run(
        "merge ... --out <an input run's results.json>",
        [*merge, str(f0), str(tmp / "folds" / "f1"), "--out", str(f0 / "results.json")],
    )
    c.run("merge ... --out <an existing folder>", [*merge, str(f0), str(tmp / "folds" / "f1"), "--out", str(tmp)])
    short = shutil.copytree(tmp / "folds" / "f1", tmp / "folds" / "f1-short")
    rows = (short / "questions_router.jsonl").read_text().splitlines(keepends=True)
    (short / "questions_router.jsonl").write_text("".join(rows[: len(rows) // 2]))
    c.run(
        "merge: a fold run whose question file lost half its rows",
        [*merge, str(f0), str(short), "--out", str(tmp / "m3.json")],
    )
    a, other = tmp / "eval" / "a", tmp / "eval" / "other"
    leftovers = tmp / "eval" / "killed"
    shutil.copytree(a, leftovers)
    (leftovers / "results.json").unlink()
    c.run(
        "paired on a killed evaluation's leftovers (question files, no results.json)",
        [RESULTS, "paired", str(leftovers), "--policy", "beta_bfs", "--reference", "dense_topk"],
    )
    c.run(
        "paired --reference equal to --policy",
        [RESULTS, "paired", str(a), "--policy", "dense_topk", "--reference", "dense_topk"],
    )
    c.run(
        "compare: evaluations of two data files (same ids)",
        [RESULTS, "compare", str(a), str(other), "--policy", "beta_bfs"],
    )
    c.run(
        "compare: the same two, the difference named, with --out",
        [
            RESULTS,
            "compare",
            str(a),
            str(other),
            "--policy",
            "beta_bfs",
            "--differ",
            "data",
            "--differ",
            "graphset",
            "--out",
            str(tmp / "cmp.json"),
        ],
        after=lambda: f"written: {(tmp / 'cmp.json').exists()}",
    )
    c.run(
        "results.py paired --n-boot 0",
        [RESULTS, "paired", str(a), "--policy", "beta_bfs", "--reference", "dense_topk", "--n-boot", "0"],
    )
    c.run(
        "collect: one run name given twice",
        [RESULTS, "collect", "--run", "x", "a", str(a), "--run", "x", "b", str(other), "--out", str(tmp / "c.json")],
    )
    edited_results_case(c)


def edited_results_case(c: Cases) -> None:
    """make_docs.py over a results file whose paired difference was edited by hand."""
    tmp = c.tmp
    results = shutil.copytree(ROOT / "docs" / "results", tmp / "results")
    path = results / "learned_vs_hybrid_locomo.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    entry = next(x for x in data["paired"] if x["metric"] == "evidence_recall" and x["policy"] == "router")
    entry["mean_diff"] = round(entry["mean_diff"] + 0.2, 6)
    write_json(path, data, indent=None)
    shutil.copy(ROOT / "README.md", tmp / "README.md")
    readme = (tmp / "README.md").read_bytes()
    c.run(
        f"make_docs.py after router's paired difference in {path.name} was edited by hand (+0.2)",
        [
            "scripts/make_docs.py",
            "--results",
            str(results),
            "--docs",
            str(tmp / "docs"),
            "--readme",
            str(tmp / "README.md"),
        ],
        after=lambda: f"README.md changed: {(tmp / 'README.md').read_bytes() != readme}",
    )


def input_cases(c: Cases) -> None:
    """Data and settings that were a traceback or taken on trust, and questions of every length."""
    tmp, s = c.tmp, f"graphset={c.tmp / 'set'}"
    test_copy = locomo_copy(tmp / "renamed.json", 3, renamed)
    c.run(
        "the evaluated file under renamed ids as a training set",
        [
            "scripts/train.py",
            s,
            *TRAIN,
            "cv.folds=[0]",
            f"train_sets=[{{name: locomo, file: {test_copy}}}]",
            f"out_dir={tmp / 'leak'}",
        ],
    )
    c.run(
        "train_sets=hotpotqa (a name where a list belongs)",
        ["scripts/train.py", s, *TRAIN, "train_sets=hotpotqa", f"out_dir={tmp / 'bad'}"],
    )
    deep = tmp / "deep.jsonl"
    first = data_file("hotpotqa/hotpot_dev_distractor_200.jsonl").read_text(encoding="utf-8").splitlines()[0]
    deep.write_text(first + "\n" + '{"_id": "x", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    build = [
        "scripts/build_graph.py",
        "graph.encoder=hashing",
        *QUIET,
        f"out_dir={tmp / 'b'}",
        f"graphset_dir={tmp / 'sets'}",
    ]
    c.run("a HotpotQA file whose second record nests 100,000 lists", [*build, "data=hotpotqa", f"data.file={deep}"])
    c.run("build_index.py index.m=100000000", ["scripts/build_index.py", s, "index.m=100000000"])
    study = "scripts/studies/writer_heldout/run.py"
    c.run("writer_heldout writer.max_steps=0", [study, s, "writer.max_steps=0", f"out_dir={tmp / 'w'}"])
    c.run("writer_heldout writer.max_steps=-1", [study, s, "writer.max_steps=-1", f"out_dir={tmp / 'w'}"])
    c.run("writer_heldout sft.max_steps=0", [study, s, "sft.max_steps=0", f"out_dir={tmp / 'w'}"])
    c.run(
        "writer_heldout writer.model=<a missing folder>",
        [study, s, f"writer.model={tmp / 'no-model'}", f"out_dir={tmp / 'w'}"],
    )
    for words in (100_000, 262_144):
        f = locomo_copy(tmp / f"q{words}.json", 1, long_question(words))
        built = ["scripts/build_graph.py", "data=locomo", f"data.file={f}", "graph.encoder=hashing", *QUIET]
        subprocess.run(
            [sys.executable, *built, f"graphset={tmp / f'q{words}'}", f"out_dir={tmp / 'b'}"],
            cwd=ROOT,
            env=c.env,
            check=True,
            capture_output=True,
        )
        c.run(
            f"a question of {words:,} words, asked of bm25, hybrid and router",
            [
                "scripts/evaluate.py",
                f"graphset={tmp / f'q{words}'}",
                *EVAL,
                "policies=[bm25,hybrid,router]",
                "policy=router",
            ]
            + [
                "policy.device=cpu",
                f"policy.checkpoint={tmp / 'run/fold0/router/best.pt'}",
                "stats.reference=null",
                f"out_dir={tmp / f'o{words}'}",
            ],
            after=lambda out=tmp / f"o{words}": served(out, "conv-26#0"),
        )
    c.run(
        "bounded and exact hybrid on 8 queries whose every cosine is 0",
        ["-c", TIES],
        shown="python -c <rank 8 zero-cosine queries with min_nodes=0 and 16384>",
    )
    other = locomo_copy(tmp / "other-file.json", 1, reworded)
    c.run(
        "three forced rebuilds from another file, each killed before its commit",
        ["-c", KILLED_REBUILDS, str(tmp / "killed-set"), str(tmp / "cache"), str(other)],
        shown="python -c <reuse_or_build(force=true) x3, each killed after keeping the old set aside>",
    )


def served(out: Path, qid: str) -> str:
    """How many nodes each policy of the evaluation in ``out`` loaded for question ``qid``."""
    loaded = {}
    for path in sorted(out.glob("questions_*.jsonl")):
        row = next(json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if f'"{qid}"' in x)
        loaded[path.stem.removeprefix("questions_")] = len(row["loaded"])
    if not loaded:
        return "question files written: 0"
    return f"nodes loaded for the long question ({qid}): " + ", ".join(f"{k} {v}" for k, v in loaded.items())


def setup(c: Cases) -> None:
    """The sets, a finished training, fold runs of two data files and two learning rates, two evaluations."""
    tmp = c.tmp
    save_locomo_set(tmp, 3)
    save_locomo_set(tmp, 3, "other", str(locomo_copy(tmp / "reworded.json", 3, reworded)))
    jobs = [
        [f"graphset={tmp / 'set'}", "cv.folds=[0]", f"out_dir={tmp / 'run'}", "trainer.objective.imitation_epochs=2"],
        [f"graphset={tmp / 'set'}", "cv.folds=[0]", f"out_dir={tmp / 'folds' / 'f0'}"],
        [f"graphset={tmp / 'set'}", "cv.folds=[1]", f"out_dir={tmp / 'folds' / 'f1'}"],
        [f"graphset={tmp / 'other'}", "cv.folds=[1]", f"out_dir={tmp / 'folds' / 'f1-other'}"],
        [f"graphset={tmp / 'set'}", "cv.folds=[1]", "trainer.optim.lr=0.01", f"out_dir={tmp / 'folds' / 'f1-lr'}"],
    ]
    for i, job in enumerate(jobs):
        argv = [*TRAIN, "trainer.objective.imitation_epochs=1", *job, f"hydra.run.dir={tmp}/hydra-setup{i}"]
        subprocess.run(
            [sys.executable, "scripts/train.py", *argv], cwd=ROOT, env=c.env, check=True, capture_output=True
        )
    for name in ("set", "other"):
        argv = [f"graphset={tmp / name}", *EVAL, "policies=[beta_bfs,dense_topk]", "stats.reference=dense_topk"]
        argv += [f"out_dir={tmp / 'eval' / ('a' if name == 'set' else 'other')}", f"hydra.run.dir={tmp}/hydra-e{name}"]
        subprocess.run(
            [sys.executable, "scripts/evaluate.py", *argv], cwd=ROOT, env=c.env, check=True, capture_output=True
        )


def work(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="reliability-results-") as name:
        c = Cases(Path(name))
        setup(c)
        training_cases(c)
        results_cases(c)
        input_cases(c)
    write_cases(args.out, "results_and_training.py", c.records)


def main(argv: list[str] | None = None) -> int:
    return command(out_arguments(__doc__.splitlines()[0], "reliability_results_and_training"), work, argv)


if __name__ == "__main__":
    sys.exit(main())
