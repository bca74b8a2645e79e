"""kill -9 a live memory during a stream of adds, again and again, then check what it holds.

    python scripts/reliability/memory_kills.py --kills 10 --out docs/results/memory_kills.json

A child process opens a ``graphmem.Memory`` (hashing encoder) and adds the turns of the LoCoMo
conversations one ``add`` at a time, from where the memory stands, printing each id once ``add`` has
returned (committed). It is killed with SIGKILL at a random moment ``--kills`` times. Then:

* the memory reopens and passes its integrity check (SQLite's and the graph's);
* it holds exactly the committed adds, in arrival order: every reported id, plus at most one per kill that
  was committed but killed before it was reported;
* it equals a memory that received the same adds without a crash (every edge, feature and counter) and
  answers the same queries with the same ranked lists.

Writes the report as JSON; exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graphmem import Memory
from graphmem.builders.locomo import turn_records
from graphmem.config.entry import command
from graphmem.core.graph import edge_table
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file
from graphmem.store.io import write_json

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ("When did Caroline go to the LGBTQ support group?", "What did Melanie paint?", "Where did they camp?")
CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
from memory_kills import stream_records
from graphmem import Memory

records = stream_records()
with Memory.open(sys.argv[1], encoder="hashing") as mem:
    print("ready", len(mem), flush=True)
    for r in records[len(mem):]:
        mem.add(r.text, speaker=r.speaker, time=r.time, session=r.session, id=r.id, meta=r.meta)
        print(r.id, flush=True)
"""


def stream_records() -> list:
    """The turns of every LoCoMo conversation, one after the other (ids and sessions prefixed by the conversation)."""
    out = []
    for conv in load_locomo(data_file("locomo/locomo_dev8.json"))[0]:
        out += [
            dataclasses.replace(r, id=f"{conv.sample_id}/{r.id}", session=f"{conv.sample_id}/{r.session}")
            for r in turn_records(conv)
        ]
    return out


def stream_and_kill(folder: Path, kills: int, seed: int) -> list[str]:
    """Run the adding child ``kills`` times, each killed (SIGKILL) at a random moment; the ids it reported."""
    rng, reported = random.Random(seed), []
    for _ in range(kills):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(folder), str(Path(__file__).resolve().parent)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        if not child.stdout.readline().startswith("ready"):
            raise RuntimeError(f"the adding child did not start: {child.communicate()}")
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        reported += [line for line in out.splitlines() if line]
    return reported


def check(folder: Path, reported: list[str], kills: int) -> dict:
    """What the killed memory holds against the committed adds and a memory that never crashed."""
    records = stream_records()
    with Memory.open(folder, encoder="hashing") as mem:
        stored, problems = list(mem.graph.node_ids), mem.integrity()
        crashed, answers = edge_table(mem.graph), [mem.retrieve(q).ranked_ids() for q in QUERIES]
    with tempfile.TemporaryDirectory() as tmp, Memory.open(Path(tmp) / "clean", encoder="hashing") as clean:
        clean.add_many(records[: len(stored)])
        same_graph = edge_table(clean.graph) == crashed
        same_answers = [clean.retrieve(q).ranked_ids() for q in QUERIES] == answers
    in_order = stored == [r.id for r in records[: len(stored)]]
    unreported = len(stored) - len(reported)
    out = {
        "kills": kills,
        "reported_adds": len(reported),
        "stored_adds": len(stored),
        "committed_not_reported": unreported,
        "integrity_problems": problems,
        "in_arrival_order": in_order,
        "every_reported_add_stored": set(reported) <= set(stored) and len(set(reported)) == len(reported),
        "equal_to_an_uncrashed_memory": same_graph,
        "same_ranked_lists": same_answers,
    }
    out["ok"] = bool(
        not problems
        and in_order
        and out["every_reported_add_stored"]
        and 0 <= unreported <= kills
        and same_graph
        and same_answers
    )
    return out


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "reliability" / "memory_kills.json")
    return ap


def work(args: argparse.Namespace) -> int:
    """Stream with kills, check the memory against a clean one, write the report; 1 when a check failed."""
    if args.kills < 1:
        raise ValueError(f"--kills must be at least 1, got {args.kills}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "memory"
        reported = stream_and_kill(folder, args.kills, args.seed)
        report = {"command": "python " + " ".join(sys.argv), "seed": args.seed, **check(folder, reported, args.kills)}
    write_json(args.out, report)
    print(
        f"{args.kills} kills: {report['stored_adds']} adds stored, {report['reported_adds']} reported, "
        f"{'ok' if report['ok'] else 'FAILED'}; written to {args.out}"
    )
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
