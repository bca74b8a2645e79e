"""kill -9 during a graph save leaves the previous file intact (atomic temp + rename)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import torch

from graphmem.graph import MemoryGraph
from graphmem.io import load_graph, save_graph

WRITER = textwrap.dedent("""
    import sys, torch
    from graphmem.graph import MemoryGraph
    from graphmem.io import save_graph
    n = 40_000
    g = MemoryGraph.empty(dim=384)
    g.add_nodes([f"n{i}" for i in range(n)], ["new text"] * n, torch.ones(n, 384))
    print("ready", flush=True)
    while True:
        save_graph(g, sys.argv[1])
""")


def test_kill_during_save_keeps_previous_graph(tmp_path):
    path = tmp_path / "graph.safetensors"
    old = MemoryGraph.empty(dim=384)
    old.add_nodes(["a", "b"], ["old a", "old b"], torch.zeros(2, 384))
    save_graph(old, path)

    for delay in (0.05, 0.15, 0.3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        graph = load_graph(path)  # never half-written: either the old graph or a complete new one
        assert graph.node_ids[:2] in (["a", "b"], ["n0", "n1"])
        assert graph.num_nodes in (2, 40_000)
