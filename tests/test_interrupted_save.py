"""kill -9 during a graph save leaves the previous file intact (atomic temp + rename)."""

import os
import signal
import sys
import textwrap
import time

import torch

from graphmem.core.graph import MemoryGraph
from graphmem.store.io import load_graph, save_graph
from tests import script_runner

WRITER = textwrap.dedent("""
    import sys, torch
    from graphmem.core.graph import MemoryGraph
    from graphmem.store.io import save_graph
    n = 40_000
    g = MemoryGraph.empty(dim=384)
    g.add_nodes([f"n{i}" for i in range(n)], ["new text"] * n, torch.ones(n, 384))
    open(sys.argv[2], "w").close()  # ready: saving from now on
    while True:
        save_graph(g, sys.argv[1])
""")


def test_kill_during_save_keeps_previous_graph(tmp_path):
    path = tmp_path / "graph.safetensors"
    old = MemoryGraph.empty(dim=384)
    old.add_nodes(["a", "b"], ["old a", "old b"], torch.zeros(2, 384))
    save_graph(old, path)

    for delay in (0.05, 0.15, 0.3):
        ready = tmp_path / f"ready-{delay}"
        proc = script_runner.ScriptProcess(
            [sys.executable, "-c", WRITER, str(path), str(ready)],
            cwd=os.getcwd(),
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        deadline = time.time() + 120
        while not ready.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        assert ready.exists(), proc.communicate(timeout=1)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL  # killed while saving, not ended
        graph = load_graph(path)  # never half-written: either the old graph or a complete new one
        assert graph.node_ids[:2] in (["a", "b"], ["n0", "n1"])
        assert graph.num_nodes in (2, 40_000)
