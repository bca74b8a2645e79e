"""kill -9 an in-place rebuild of a graph set at a random file, then check what is left.

    python scripts/reliability/kill_rebuild.py --data hotpotqa --runs 5   # the real HotpotQA set, MiniLM
    python scripts/reliability/kill_rebuild.py --data hotpotqa --limit 12 --encoder hashing  # small and fast (the test)

1. builds the set with ``--base`` (default ``graph.semantic_k=5``) with ``scripts/build_graph.py``,
   and, in a separate folder, a clean build with ``--other`` (``graph.semantic_k=3``): the edge
   counts of the two clean builds;
2. ``--runs`` times: starts the ``--other`` build in the base set's folder (``force=true``: it is
   another source, so the base set is kept in ``replaced-*/`` first), kills it with SIGKILL once
   it has written a random number of graph files (1 .. number of graphs), loads what the folder
   holds, and reruns the ``--base`` build there, as a user would (with ``force=true`` when the
   folder holds the ``--other`` set).

A run is **mixed** when the folder loads as a set whose edge count matches neither clean build,
or whose config hash claims one config with the other's edges, or when the rerun reuses a set
whose edges are not the base build's. Prints one line per run and writes ``kill_rebuild.json``.
Exit status 1 when any run was mixed.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from graphmem.config.entry import command
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json

ROOT = Path(__file__).resolve().parents[2]


def build(root: Path, args: argparse.Namespace, overrides: list[str]) -> subprocess.Popen:
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "build_graph.py"),
        f"data={args.data}",
        f"graph.encoder={args.encoder}",
        f"graphset={root / 'set'}",
        "plot=false",
        "progress=false",
        f"hydra.run.dir={args.out / 'hydra'}",
        *([f"data.limit={args.limit}"] if args.limit else []),
        *overrides,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRAPHMEM_CACHE_DIR": str(args.out / "cache")}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"build failed (exit {proc.returncode}):\n{out[-3000:]}")
    return out


def only_set(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if p.is_dir() and p.name != "hydra"]
    return folder


def describe(folder: Path) -> dict:
    """What the folder loads as: config hash and edge count, or the refusal."""
    try:
        gs = GraphSet.load(folder)
    except Exception as err:  # noqa: BLE001 - any refusal is an outcome to report
        return {"loads": False, "error": f"{type(err).__name__}: {str(err)[:160]}"}
    return {"loads": True, "hash": gs.config_hash, "edges": sum(g.num_edges for g in gs.graphs.values())}


def set_files(folder: Path) -> list[Path]:
    """The safetensors files of the folder's generations (not of sets kept aside in ``replaced-*/``)."""
    return list(folder.glob("gen-*/**/*.safetensors"))


def written_since(folder: Path, before: dict[Path, int]) -> int:
    """Graph files written (new or rewritten) since ``before`` (path -> mtime_ns) was taken."""
    count = 0
    for p in set_files(folder):
        try:
            mtime = p.stat().st_mtime_ns
        except FileNotFoundError:
            continue
        count += before.get(p) != mtime
    return count


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="hotpotqa")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--base", nargs="*", default=["graph.semantic_k=5"])
    ap.add_argument("--other", nargs="*", default=["graph.semantic_k=3"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None, help="seed of the kill points (default: random, printed)")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "kill_rebuild")
    return ap


def work(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)

    sets, clean = args.out / "sets", args.out / "clean"
    finish(build(sets, args, args.base + ["force=true"]))
    finish(build(clean, args, args.other + ["force=true"]))
    folder = only_set(sets)
    base, other = describe(folder), describe(only_set(clean))
    graphs = len(set_files(folder)) - 1  # minus the query embeddings
    print(f"seed {seed}; clean builds: base {base['edges']} edges, other {other['edges']} edges; {graphs} graph files")
    clean_hashes = {base["hash"]: base["edges"], other["hash"]: other["edges"]}

    runs = []
    for i in range(args.runs):
        k = rng.randint(1, graphs)
        before = {p: p.stat().st_mtime_ns for p in set_files(folder)}
        proc = build(sets, args, args.other + ["force=true"])  # another source: replacing it takes force
        while proc.poll() is None and written_since(folder, before) < k:
            time.sleep(0.002)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        proc.communicate()
        written = written_since(folder, before)
        after_kill = describe(folder)
        state = (
            "refused"
            if not after_kill["loads"]
            else {base["hash"]: "previous set", other["hash"]: "new set"}.get(after_kill["hash"], "unknown config")
        )
        out = finish(build(sets, args, args.base + (["force=true"] if state == "new set" else [])))
        rerun = describe(folder)
        mixed = (after_kill["loads"] and clean_hashes.get(after_kill["hash"]) != after_kill["edges"]) or (
            rerun.get("edges") != base["edges"]
        )
        run = {
            "run": i + 1,
            "kill_after_files": k,
            "killed": killed,
            "files_written": written,
            "after_kill": after_kill,
            "loads_as": state,
            "rerun": "reused" if "reused the saved graph set" in out else "rebuilt",
            "rerun_edges": rerun.get("edges"),
            "mixed": bool(mixed),
        }
        runs.append(run)
        print(
            f"run {i + 1}: kill -9 after {k} graph files ({written} written, killed={killed}) -> loads as {state}"
            f"{' (' + str(after_kill.get('edges')) + ' edges)' if after_kill['loads'] else ''}; rerun of the base "
            f"build {run['rerun']}, {run['rerun_edges']} edges; {'MIXED' if mixed else 'not mixed'}"
        )
    payload = {"seed": seed, "base": base, "other": other, "graph_files": graphs, "runs": runs, "args": vars(args)}
    write_json(args.out / "kill_rebuild.json", payload)
    return int(any(r["mixed"] for r in runs))


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
