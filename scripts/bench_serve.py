"""Served latency of the walk ``scripts/train.py`` trains, beside ``beta_bfs``, on a saved graph set.

Every question of the set is served alone, one at a time, as an agent calls the policy
(:func:`graphmem.eval.latency.serving_latency`: ``retrieve_batch(graph, [q], budget)``, entry
selection included, after one untimed call per graph), by each policy in turn in the same run at
``--threads`` torch threads. The router is the trained checkpoint ``--checkpoint`` (a
``last.pt`` / ``best.pt`` of ``scripts/train.py``), or a freshly initialised walk scorer without
one. Reported per policy: p50 / p95 / p99 / mean of the wall time and of the calling thread's CPU
time, and the router's p50 over beta_bfs's. The load average before and after is recorded: on a
shared machine, wall time includes waits for a core and CPU time does not.

    python scripts/bench_serve.py --graphset outputs/graphs/musique-pooled \\
        --checkpoint outputs/train/locomo/fold0/router/best.pt --out docs/results/serve_latency.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from graphmem.eval.latency import serving_latency
from graphmem.graphset import GraphSet
from graphmem.io import atomic_write
from graphmem.policies import Budget, make_policy
from graphmem.policies.router import RouterPolicy
from models.walk_scorer import WalkScorer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphset", required=True, help="a saved graph set directory")
    ap.add_argument("--checkpoint", default=None, help="walk checkpoint of scripts/train.py (default: untrained)")
    ap.add_argument("--repeats", type=int, default=1, help="serve each question this many times, keep its fastest")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", default="outputs/benchmark/serve_latency.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        gs = GraphSet.load(args.graphset)
        if args.checkpoint:
            router = RouterPolicy(checkpoint=args.checkpoint, device="cpu")
        else:
            router = RouterPolicy(scorer=WalkScorer(dim=int(gs.query_embeddings.shape[1])), device="cpu")
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    budget = Budget()
    by_qid = {q.qid: q for q in gs.queries()}
    queries = [by_qid[q.qid] for q in gs.questions]
    graph_of = [q.graph for q in gs.questions]
    report: dict = {
        "command": "python " + " ".join(sys.argv),
        "graphset": gs.dataset,
        "graphs": len(gs.graphs),
        "nodes": sum(g.num_nodes for g in gs.graphs.values()),
        "questions": len(queries),
        "checkpoint": args.checkpoint,
        "budget": dataclasses.asdict(budget),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg(),
        "policies": {},
    }
    for name, policy in (("router", router), ("beta_bfs", make_policy("beta_bfs", device="cpu"))):
        served = serving_latency(policy, gs.graphs, queries, budget, graph_of=graph_of, repeats=args.repeats)
        served.pop("seconds")
        report["policies"][name] = served
        cpu = served["cpu"]["p50_ms"]
        print(f"{name:<9} p50 {served['p50_ms']:8.3f} ms  p95 {served['p95_ms']:8.3f} ms  cpu p50 {cpu:8.3f} ms")
    report["load_average_at_end"] = os.getloadavg()
    pol = report["policies"]
    report["router_p50_over_beta_bfs"] = pol["router"]["p50_ms"] / pol["beta_bfs"]["p50_ms"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=1, default=str)))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
