"""Run each damaged-set, damaged-cache, unsafe-name and mismatched-checkpoint case and record what happens.

    python scripts/reliability/sets.py [--out docs/results/reliability_sets.json]

Builds small HotpotQA sets (6 records; hashing encoder at 384 and 128 dimensions, MiniLM at 384),
trains a router for one fold on the first, then runs every case as its own process on a fresh copy
of a set: the command, its exit code and its outcome (the first ``error:`` line, else the first
warning, else what the case checks afterwards), with the temporary folder written as ``<tmp>``.
``docs/reliability_cases.md`` renders the table (scripts/docgen/reliability_cases.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from case_runs import out_arguments, write_cases
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.config.entry import command
from graphmem.index.embed import HashingEncoder
from graphmem.store.encoder_cache import CachedEncoder
from graphmem.store.io import write_json
from graphmem.store.setstore import content_sha256, file_sha256

ROOT = Path(__file__).resolve().parents[2]

DATA = ["data=hotpotqa", "data.limit=6"]
QUIET = ["logger=none", "progress=false"]


class Cases:
    def __init__(self, tmp: Path):
        self.tmp, self.rows, self.n = tmp, [], 0
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        self.env["GRAPHMEM_CACHE_DIR"] = str(tmp / "cache")

    def copy(self, name: str) -> Path:
        self.n += 1
        return Path(shutil.copytree(self.tmp / name, self.tmp / f"case{self.n}"))

    def run(self, case: str, args: list[str], after=None, shown: str | None = None) -> None:
        """Run ``python <args>``; outcome: the first error line, else ``after()``, else the first warning."""
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True)
        lines = (proc.stderr + proc.stdout).splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        warnings = [line.split("[WARNING] - ", 1)[1] for line in lines if "[WARNING] - " in line]
        tracebacks = sum("Traceback" in line for line in lines)
        outcome = errors[0] if errors else (after() if after else (warnings[0] if warnings else "no error"))
        if tracebacks:
            outcome += f" ({len(lines)} lines of output with a traceback)"
        tmp = str(self.tmp)
        command = " ".join(shown.split() if shown else ["python", *args]).replace(tmp, "<tmp>")
        self.rows.append(
            {"case": case, "command": command, "exit_code": proc.returncode, "outcome": outcome.replace(tmp, "<tmp>")}
        )
        print(f"{proc.returncode:3d}  {case}: {self.rows[-1]['outcome'][:150]}", flush=True)


def edit(directory: Path, change, restamp: bool = True) -> None:
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    if restamp:
        manifest["content_sha256"] = content_sha256(manifest)
    write_json(path, manifest, indent=None)


def rewrite_queries(directory: Path, change) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    queries = directory / manifest["queries"]
    emb = load_file(str(queries))["query_embeddings"]
    with safe_open(str(queries), framework="pt") as f:
        meta = f.metadata()
    change(emb)
    save_file({"query_embeddings": emb}, str(queries), metadata=meta)
    edit(
        directory, lambda m: m["files"][m["queries"]].update(sha256=file_sha256(queries), bytes=queries.stat().st_size)
    )


def flip_signs(shard: Path, share: float = 0.05) -> None:
    data = load_file(str(shard))
    with safe_open(str(shard), framework="pt") as f:
        meta = f.metadata()
    flat = data["embeddings"].clone().view(-1)
    idx = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(0))[: int(share * flat.numel())]
    flat[idx] = -flat[idx]
    save_file({"digests": data["digests"], "embeddings": flat.view_as(data["embeddings"])}, str(shard), metadata=meta)


def evaluate(graphset: Path, *more: str) -> list[str]:
    return ["scripts/evaluate.py", f"graphset={graphset}", *DATA, "graph.encoder=hashing", *QUIET, *more]


def prepare(tmp: Path, c: Cases) -> tuple[list[str], Path, list[str]]:
    """Three small sets (hashing 384-d, 128-d, MiniLM) and a trained walk: ``(its train command, its best.pt,
    its test graphs)``."""
    data = DataConfig(name="hotpotqa", limit=6)
    for name, encoder in (("hashing", HashingEncoder(384)), ("dim128", HashingEncoder(128))):
        build_graphset(data, GraphConfig(encoder="hashing"), CachedEncoder(encoder, tmp / "cache"), False).save(
            tmp / name
        )
    build_graphset(data, GraphConfig(cache_dir=str(tmp / "cache")), progress=False).save(tmp / "minilm")
    out = tmp / "run"
    train = [
        "scripts/train.py",
        f"graphset={tmp / 'hashing'}",
        *DATA,
        "graph.encoder=hashing",
        *QUIET,
        "cv.k=3",
        "cv.folds=[0]",
        "trainer.objective.imitation_epochs=1",
        "trainer.objective.rl_epochs=1",
        "trainer.run.device=cpu",
        "baselines=[dense_topk]",
        "stats.n_boot=200",
        f"out_dir={out}",
    ]
    subprocess.run([sys.executable, *train], cwd=ROOT, env=c.env, check=True, capture_output=True)
    best = out / "fold0" / "router" / "best.pt"
    test_graphs = json.loads((out / "results.json").read_text())["splits"][0]["test"]
    return train, best, test_graphs


def names_cases(c: Cases, tmp: Path, train: list[str]) -> None:
    """1. Names that become paths."""
    (tmp / "configs" / "experiment").mkdir(parents=True)
    (tmp / "configs" / "experiment" / "escape.yaml").write_text(
        "# @package _global_\nvariants:\n  ../../victim/fold0/router: {}\n"
    )
    c.run(
        "variant named ../../victim/fold0/router",
        [
            *train[:-1],
            f"out_dir={tmp / 'mine' / 'run'}",
            "+experiment=escape",
            f"hydra.searchpath=[file://{tmp / 'configs'}]",
        ],
        shown="python scripts/train.py graphset=<set> +experiment=escape out_dir=<tmp>/mine/run"
        " # variants: {../../victim/fold0/router: {}}",
    )
    c.run("policies=[../x]", evaluate(tmp / "hashing", "policies=[../x]", f"out_dir={tmp / 'o1'}"))


def manifest_cases(c: Cases) -> None:
    """2. The manifest: edits, restamped checksums, an older format, a query row of zeros."""

    def question_text(m):
        m["questions"][3]["text"] = m["questions"][3]["text"][:-1] + "X"

    for case, change, restamp in (
        ("a question's text edited (one character)", question_text, False),
        (
            "a question's evidence edited",
            lambda m: m["questions"][0].update(evidence=m["questions"][1]["evidence"]),
            False,
        ),
        ("questions reordered, manifest checksum restamped", lambda m: m["questions"].reverse(), True),
        (
            "a question moved to another graph, checksum restamped",
            lambda m: m["questions"][0].update(graph=m["questions"][-1]["graph"]),
            True,
        ),
        ("'graphs' is a list, checksum restamped", lambda m: m.update(graphs=list(m["graphs"].values())), True),
        (
            "a duplicate question id, checksum restamped",
            lambda m: m["questions"][1].update(qid=m["questions"][0]["qid"]),
            True,
        ),
        ("a set of the previous format (manifest_version 2)", lambda m: m.update(manifest_version=2), False),
    ):
        d = c.copy("hashing")
        edit(d, change, restamp)
        c.run(case, evaluate(d, "policies=[dense_topk]", f"out_dir={d}-out"))
    d = c.copy("hashing")
    (d / "manifest.json").write_text("this is not JSON")
    c.run("manifest.json is not JSON", evaluate(d, "policies=[dense_topk]", f"out_dir={d}-out"))
    d = c.copy("hashing")
    rewrite_queries(d, lambda emb: emb[2].zero_())
    c.run("an all-zero query row, checksums restamped", evaluate(d, "policies=[dense_topk]", f"out_dir={d}-out"))


def build_cases(c: Cases, tmp: Path) -> list[str]:
    """Builds: a bad plot option, an orphan generation, a full disk; returns the build command."""
    build = ["scripts/build_graph.py", *DATA, "graph.encoder=hashing", *QUIET, f"out_dir={tmp / 'b'}"]
    sets = tmp / "sets"
    c.run(
        "build_graph.py plot_graph=nope",
        [*build, f"graphset_dir={sets / 'p'}", "plot_graph=nope"],
        after=lambda: "no error",
    )
    c.rows[-1]["outcome"] += f"; sets committed: {len(list((sets / 'p').rglob('manifest.json')))}"
    subprocess.run(
        [sys.executable, *build, f"graphset_dir={sets / 'r'}"], cwd=ROOT, env=c.env, check=True, capture_output=True
    )
    (folder,) = (sets / "r").iterdir()
    (live,) = folder.glob("gen-*")
    shutil.copytree(live, folder / "gen-20000101T000000-0badc0de")
    c.run(
        "an orphan gen-* folder when the build reuses the set",
        [*build, f"graphset_dir={sets / 'r'}"],
        after=lambda: f"reused; gen-* folders left: {len(list(folder.glob('gen-*')))}",
    )
    full_disk = (
        "import errno, os, runpy, sys, graphmem.store.setformat as f\n"
        "def full(*a, **k): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
        "f.save_graph = full\nsys.argv = ['scripts/build_graph.py', *sys.argv[1:]]\n"
        "runpy.run_path('scripts/build_graph.py', run_name='__main__')"
    )
    c.run(
        "a full disk during a rebuild (ENOSPC from the writer)",
        ["-c", full_disk, *build[1:], f"graphset_dir={sets / 'r'}", "force=true"],
        shown="python scripts/build_graph.py ... force=true  # with the graph writer raising OSError(ENOSPC)",
    )
    c.rows[-1]["outcome"] += "; the previous set loads: " + str(
        subprocess.run(
            [sys.executable, "-c", f"from graphmem.store.graphset import GraphSet; GraphSet.load('{folder}')"],
            cwd=ROOT,
            env=c.env,
            capture_output=True,
        ).returncode
        == 0
    )

    return build


def cache_cases(c: Cases, tmp: Path, build: list[str]) -> None:
    """3. The embedding cache."""
    for shard in (tmp / "cache").rglob("shard-*.safetensors"):
        if "hashing-bow-384" in str(shard):
            flip_signs(shard)
    c.run(
        "5% of the signs flipped in the cache shards, then a build into a new folder",
        [*build, f"graphset_dir={tmp / 'sets' / 'fresh'}"],
    )


def checkpoint_cases(c: Cases, tmp: Path, best: Path, test_graphs: list[str]) -> None:
    """4. Checkpoints: another encoder, another width, training graphs, a missing file."""
    router = ["policy=router", f"policy.checkpoint={best}", "policy.device=cpu"]
    test_only = f"graphs=[{','.join(test_graphs)}]"
    c.run(
        "router (hashing 384-d) on a set of another 384-d encoder (MiniLM)",
        ["scripts/evaluate.py", f"graphset={tmp / 'minilm'}", *DATA, *QUIET, *router, f"out_dir={tmp / 'o2'}"],
    )
    c.run("router (384-d) on a 128-d set", evaluate(tmp / "dim128", *router, f"out_dir={tmp / 'o3'}"))
    c.run("router evaluated on its own training graphs", evaluate(tmp / "hashing", *router, f"out_dir={tmp / 'o4'}"))
    c.run(
        "... with policy.strict_split=true",
        evaluate(tmp / "hashing", *router, "policy.strict_split=true", f"out_dir={tmp / 'o5'}"),
    )
    c.run(
        "... on its test graphs only, strict",
        evaluate(tmp / "hashing", *router, "policy.strict_split=true", test_only, f"out_dir={tmp / 'o6'}"),
        after=lambda: "no error, no warning",
    )
    c.run(
        "policy.checkpoint=<missing path>",
        evaluate(tmp / "hashing", "policy=router", f"policy.checkpoint={tmp / 'nope.pt'}", f"out_dir={tmp / 'o7'}"),
    )


def arguments() -> argparse.ArgumentParser:
    return out_arguments(__doc__.split("\n\n")[0], "reliability_sets")


def work(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="reliability-"))
    c = Cases(tmp)
    train, best, test_graphs = prepare(tmp, c)
    names_cases(c, tmp, train)
    manifest_cases(c)
    build = build_cases(c, tmp)
    cache_cases(c, tmp, build)
    checkpoint_cases(c, tmp, best, test_graphs)
    write_cases(args.out, "sets.py", c.rows)
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
