"""A memory killed with SIGKILL during a stream of adds reopens sound, holding exactly the committed adds, and
answers as a memory that received them without a crash."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_memory import edge_table

from graphmem import Memory
from graphmem.builders.locomo import turn_records
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys
from graphmem import Memory
from graphmem.builders.locomo import turn_records
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file

records = turn_records(load_locomo(data_file("locomo/locomo_dev8.json"))[0][0])
with Memory.open(sys.argv[1], encoder="hashing") as mem:
    print("ready", len(mem), flush=True)
    for r in records[len(mem):]:
        mem.add(r.text, speaker=r.speaker, time=r.time, session=r.session, id=r.id, meta=r.meta)
        print(r.id, flush=True)
"""


def stream_and_kill(folder: Path, kills: int, seed: int = 0) -> list[str]:
    """Run the adding child ``kills`` times, each killed (SIGKILL) at a random moment; the ids it reported."""
    rng, reported = random.Random(seed), []
    for _ in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(folder)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert child.stdout.readline().startswith("ready")
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        reported += [line for line in out.splitlines() if line]
    return reported


def test_kill_9_during_adds_loses_no_committed_add_and_answers_as_without_a_crash(tmp_path):
    records = turn_records(load_locomo(data_file("locomo/locomo_dev8.json"))[0][0])
    reported = stream_and_kill(tmp_path / "m", kills=3)
    with Memory.open(tmp_path / "m", encoder="hashing") as mem:
        stored = list(mem.graph.node_ids)
        assert mem.integrity() == []
        # the adds in arrival order, every reported one stored; at most one per kill committed but not reported
        assert stored == [r.id for r in records[: len(stored)]]
        assert len(set(reported)) == len(reported) and set(reported) <= set(stored)
        assert len(stored) - len(reported) <= 3
        crashed = edge_table(mem.graph)
        queries = ["When did Caroline go to the LGBTQ support group?", "What did Melanie paint?"]
        answers = [mem.retrieve(q).ranked_ids() for q in queries]
    with Memory.open(tmp_path / "clean", encoder="hashing") as clean:
        clean.add_many(records[: len(stored)])
        assert edge_table(clean.graph) == crashed
        assert [clean.retrieve(q).ranked_ids() for q in queries] == answers
