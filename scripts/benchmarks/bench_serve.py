"""Served latency of the walk ``scripts/train.py`` trains, beside ``beta_bfs``, on a saved graph set.

Every question of the set is served alone, as an agent calls the policy (``retrieve_batch(graph,
[q], budget)``, entry selection included, after one untimed call per graph), at ``--threads`` torch
threads, by three policies *interleaved* question by question (each question's fastest of
``--repeats`` calls per policy), so a load that changes during the run weighs on all alike:

* ``router``: the router policy as it serves (:func:`graphmem.policies.walk_one.walk_one`, the scorer's
  per-graph tensors cached, the list ranked by the checkpoint's ranking head from rows written for the
  one query, :func:`graphmem.policies.rank_features.one_query_rank_inputs`);
* ``router_batched``: the same scorer through the batched training walk with ``B = 1`` and the
  per-graph tensors recomputed per call, its list ranked from the batched feature rows
  (:func:`graphmem.policies.rank_features.rank_inputs`): how the router served one query before;
* ``beta_bfs``.

The router is the trained checkpoint ``--checkpoint`` (a ``last.pt`` / ``best.pt`` of
``scripts/train.py``; its ranking head is served and timed when it has one: ``rank_head``), or a freshly
initialised walk scorer without one. Reported per policy: p50 / p95 / p99 / mean of the wall time and of
the calling thread's CPU time; the ratios of the p50s in this run; and on how many questions ``router``
and ``router_batched`` loaded the same nodes and returned the same ranked list. The load average before
and after is recorded: on a shared machine, wall time includes waits for a core and CPU time does not.

    python scripts/benchmarks/bench_serve.py --graphset outputs/graphs/musique-pooled \\
        --checkpoint outputs/train/locomo/fold0/router/best.pt --out docs/results/serve_latency.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.core import Budget
from graphmem.eval.latency import latency_summary
from graphmem.index.lexical_features import scope_lexical
from graphmem.policies import make_policy
from graphmem.policies.rank_features import rank_inputs
from graphmem.policies.ranking import query_matrix
from graphmem.policies.router import RouterPolicy
from graphmem.policies.walk import walk, walk_trace
from graphmem.store.graphset import GraphSet
from graphmem.store.io import atomic_write
from models.walk_scorer import WalkScorer


class BatchedWalkRouter(RouterPolicy):
    """The router serving through the batched walk, the scorer's per-graph tensors recomputed per call, and
    its list ranked from the batched ranking features (:func:`graphmem.policies.rank_features.rank_inputs`)."""

    def _trace(self, scope, entries, budget, serving=False):
        tables, _ = self._walk_tables(scope)
        q = query_matrix(scope.graph, scope.queries).to(scope.device)
        lexical = scope_lexical(scope) if self.scorer.config.lexical else None
        trace = walk_trace(walk(tables, self.scorer, q, entries, budget, lexical=lexical), tables, budget)
        return tables, trace, q, lexical, None

    def _rank_items(self, tables, tr, q, lexical, ctx, entries):
        return rank_inputs(tables, q, lexical, entries, (tr.query, tr.node, tr.depth, tr.score))


def interleaved(policies, graphs, queries, graph_of, budget, repeats):
    """Per policy: wall and CPU seconds of each query served alone (fastest of ``repeats``), and what it loaded."""
    for name in dict.fromkeys(graph_of):  # one untimed call per graph and policy: per-graph tables
        first = graph_of.index(name)
        for policy in policies.values():
            policy.retrieve_batch(graphs[name], [queries[first]], budget)
    out = {name: {"wall": [], "cpu": [], "loaded": [], "ranked": []} for name in policies}
    for q, name in zip(queries, graph_of):
        for key, policy in policies.items():
            wall = cpu = float("inf")
            for _ in range(max(1, repeats)):
                c, t = time.thread_time(), time.perf_counter()
                (r,) = policy.retrieve_batch(graphs[name], [q], budget)
                wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.thread_time() - c)
            out[key]["wall"].append(wall)
            out[key]["cpu"].append(cpu)
            out[key]["loaded"].append(r.loaded)
            out[key]["ranked"].append(r.ranked)
    return out


def command_line(argv: list[str]) -> list[str]:
    """``argv`` without ``--note`` and its value (the report keeps the note on its own)."""
    out, skip = [], False
    for a in argv:
        if not skip and a != "--note" and not a.startswith("--note="):
            out.append(a)
        skip = a == "--note"
    return out


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphset", required=True, help="a saved graph set directory")
    ap.add_argument("--checkpoint", default=None, help="walk checkpoint of scripts/train.py (default: untrained)")
    ap.add_argument("--repeats", type=int, default=1, help="serve each question this many times, keep its fastest")
    ap.add_argument("--entries", default="hybrid", help="the router's entry selector (configs/policy/router.yaml)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: $OMP_NUM_THREADS, else 1)")
    ap.add_argument("--note", default=None, help="what the run measures, kept with the report (its `code`)")
    ap.add_argument("--out", default="outputs/benchmark/serve_latency.json")
    return ap


def work(args: argparse.Namespace) -> None:
    try:
        threads = set_threads({"threads": args.threads})
        gs = GraphSet.load(args.graphset)
        made = (
            {"checkpoint": args.checkpoint}
            if args.checkpoint
            else {"scorer": WalkScorer(dim=int(gs.query_embeddings.shape[1]))}
        )
        router, batched = (
            cls(**made, device="cpu", entry_selector=args.entries) for cls in (RouterPolicy, BatchedWalkRouter)
        )
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    budget = Budget()
    by_qid = {q.qid: q for q in gs.queries()}
    queries = [by_qid[q.qid] for q in gs.questions]
    graph_of = [q.graph for q in gs.questions]
    report: dict = {
        "command": "python " + " ".join(command_line(sys.argv)),
        "code": args.note,
        "graphset": gs.dataset,
        "graphs": len(gs.graphs),
        "nodes": sum(g.num_nodes for g in gs.graphs.values()),
        "questions": len(queries),
        "checkpoint": args.checkpoint,
        "rank_head": router.rank_head is not None,
        "budget": dataclasses.asdict(budget),
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "load_average_at_start": os.getloadavg(),
        "policies": {},
    }
    policies = {"router": router, "router_batched": batched, "beta_bfs": make_policy("beta_bfs", device="cpu")}
    runs = interleaved(policies, gs.graphs, queries, graph_of, budget, args.repeats)
    for name, run in runs.items():
        served = {**latency_summary(run["wall"]), "cpu": latency_summary(run["cpu"])}
        report["policies"][name] = served
        cpu = served["cpu"]["p50_ms"]
        print(f"{name:<15} p50 {served['p50_ms']:8.3f} ms  p95 {served['p95_ms']:8.3f} ms  cpu p50 {cpu:8.3f} ms")
    report["load_average_at_end"] = os.getloadavg()
    pol = report["policies"]
    for a, b in (("router", "router_batched"), ("router", "beta_bfs")):
        report[f"{a}_p50_over_{b}"] = pol[a]["p50_ms"] / pol[b]["p50_ms"]
        report[f"{a}_cpu_p50_over_{b}"] = pol[a]["cpu"]["p50_ms"] / pol[b]["cpu"]["p50_ms"]
    for what, field in (("loads", "loaded"), ("ranks", "ranked")):
        same = sum(x == y for x, y in zip(runs["router"][field], runs["router_batched"][field]))
        report[f"router_{what}_what_router_batched_{what}"] = f"{same} of {len(queries)} questions"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=1, default=str)))
    print(f"written to {out}")


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
