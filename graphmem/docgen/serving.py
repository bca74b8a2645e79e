"""``docs/serving.md``: served latency of the learned walk, from ``docs/results/serve_latency*.json``
(``scripts/benchmarks/bench_serve.py``, before and after the question-time path) and
``docs/results/serving_scaling.json`` (``scripts/benchmark.py +suite=scaling``, the walk beside beta_bfs at
each graph size)."""

from __future__ import annotations

from pathlib import Path

from graphmem.docgen.sources import read_json

PROSE = """# Serving the learned walk

At question time the router policy (`graphmem/policies/router.py`) serves one query with
`graphmem.policies.walk_one.walk_one`: the greedy walk that training samples, with the candidate pool
as a max-heap instead of the batch's `[1, P]` masks. A closed candidate (target loaded, parent out
of children, tokens that no longer fit) never opens again, so the best open candidate is the heap's
top after popping closed ones; each step is one pop and one `score` call on the new node's
out-pairs. The scorer's query-independent tensors (node projections, every pair's edge features,
`WalkScorer.static`) are computed once per graph and weights and cached on the graph (invalidated
when the graph or the weights change), and `cos(q, x)` is gathered per candidate instead of one
`[B, N]` product on graphs above 2^17 nodes, so a query's cost is bounded by the budget and the
degrees. `tests/test_walk_serving.py` checks that the served walk loads what the batched training
walk loads (same nodes, depths and traversed edges) on every question of the pooled MuSiQue set.

The lexical features of a candidate (`graphmem/lexical_features.py`) are one binary search per query
token in the graph's sorted `(token row, node)` keys, built once per graph; each query token's id,
idf and rarity are kept per graph. The walk reads the graph's CSR offsets, targets and token counts
as per-graph Python lists and scores no children of its last load (they could never be loaded).

Each score call of the served walk is a gather plus a few ops (`WalkScorer.score_span` and
`score_entries`, `models/walk_scorer.py`): an expansion's candidates are the contiguous out-pairs of
one loaded node, so their edge features `e` and pair features `a` are slices of the per-graph tables,
and the query's node columns of the similarity features (cosine, the look-ahead's max and mean over
every pair at once, each minus `c*`) and its lexical features of every node (computed for the nodes
holding one of its terms) are made once per query, on graphs up to 2^16 pairs. Every column is the
value the tensor path computes, op for op, and the structural head runs on the same rows, so the
scores are bit for bit those of the batched walk (`tests/test_walk_span.py`); the stop test is the
stop head's arithmetic in float32 scalars. The goal: router p50 at most 5 ms on pooled MuSiQue, at
most 6x `beta_bfs` in the same run, one thread.

Where the rest goes (cProfile of the served path on the same set, one thread): about 30% is the
head on each call's rows (one call per expansion: a score's last bits depend on which other
candidates share its call, so expansions are not scored together), about 16% the per-query node and
lexical columns, about 10% the heap and the stop test, about 13% the hybrid entry selection, 10% the
query's lexical terms, 8% the scorer's `prepare` (modulation, intent, the query's projections and
its cosine row).
"""


def _served(name: str, payload: dict) -> list[str]:
    load = ", ".join(f"{x:.1f}" for x in payload["load_average_at_start"])
    threads = payload.get("threads", payload.get("torch_threads", ""))
    out = []
    for policy, r in payload["policies"].items():
        out.append(
            f"| {name} | {policy} | {payload['questions']} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
            f"{r['cpu']['p50_ms']:.2f} | {r['cpu']['p95_ms']:.2f} | {threads} | {load} |"
        )
    return out


def _goal(r: dict) -> str:
    """Whether the run meets the page's goal (router p50 <= 5 ms and <= 6x beta_bfs, wall and CPU)."""
    p50, wall, cpu = r["policies"]["router"]["p50_ms"], r["router_p50_over_beta_bfs"], r["router_cpu_p50_over_beta_bfs"]
    parts = [f"router p50 {p50:.2f} ms: {'met' if p50 <= 5 else 'not met'} (<= 5 ms)"]
    parts.append(f"{max(wall, cpu):.1f}x beta_bfs: {'met' if max(wall, cpu) <= 6 else 'not met'} (<= 6x)")
    return "Goal: " + "; ".join(parts) + "."


def _scaling(payload: dict) -> list[str]:
    lines = [
        "| nodes | variant | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms | entry recall |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for size in payload["sizes"].values():
        for name, r in size["policies"].items():
            if "skipped" in r:
                continue
            lines.append(
                f"| {size['nodes']} | {name} | {r['end_to_end_p50_ms']:.2f} | {r['end_to_end_p95_ms']:.2f} | "
                f"{r['end_to_end_cpu_p50_ms']:.2f} | {r['end_to_end_cpu_p95_ms']:.2f} | {r['entry_recall_at_k']:.4f} |"
            )
    growth = payload.get("growth") or {}
    if growth:
        lines += ["", "| variant | p50 largest / smallest | CPU p50 largest / smallest |", "|---|---:|---:|"]
        for name, g in growth.items():
            wall, cpu = g["p50_largest_over_smallest"], g["cpu_p50_largest_over_smallest"]
            lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} |")
    return lines


def render(results_dir: Path) -> str:
    """The whole page: the prose, the served latencies before and after, the scale sweep."""
    results_dir = Path(results_dir)
    out = [PROSE.rstrip(), "", "## Served latency on pooled MuSiQue", ""]
    runs = [(n, results_dir / f) for n, f in (("now", "serve_latency.json"), ("before", "serve_latency_before.json"))]
    runs = [(n, read_json(p)) for n, p in runs if p.is_file()]
    for name, payload in runs:
        out.append(f"* {name}: `{payload['command']}`" + (f" ({payload['code']})" if payload.get("code") else ""))
    out += [
        "",
        "One query at a time, entry selection included, one thread; each question's fastest of the command's",
        "repeats. `router_batched` is the same scorer served as before `walk_one` (the batched walk with",
        "`B = 1`, per-graph tensors recomputed per call), interleaved question by question with `router` and",
        "`beta_bfs` in the same run. Wall time includes waits for a core on a shared machine (load average at",
        "the start); CPU time is the serving thread's own.",
        "",
        "| run | policy | questions | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms | threads | load average |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, payload in runs:
        out += _served(name, payload)
    if runs and "router_p50_over_router_batched" in runs[0][1]:
        r = runs[0][1]
        out += [
            "",
            f"In the same run: router p50 over router_batched {r['router_p50_over_router_batched']:.2f} (wall), "
            f"{r['router_cpu_p50_over_router_batched']:.2f} (CPU); over beta_bfs {r['router_p50_over_beta_bfs']:.2f} "
            f"(wall), {r['router_cpu_p50_over_beta_bfs']:.2f} (CPU). Same loaded nodes: "
            f"{r['router_loads_what_router_batched_loads']}.",
            "",
            _goal(r),
        ]
    path = results_dir / "serving_scaling.json"
    if path.is_file():
        payload = read_json(path)
        load = [", ".join(f"{x:.1f}" for x in payload[k]) for k in ("load_average_at_start", "load_average_at_end")]
        out += ["", "## Scale sweep", "", f"Command: `{payload['command']}`", ""]
        out += [f"Load average at the start: {load[0]}; at the end: {load[1]} (2 cores, shared).", ""]
        out += [
            "Synthetic graphs (dim 64, average degree 8), 200 queries served one at a time (fastest of 3),",
            "the walk freshly initialised and without lexical features (its cost does not depend on the",
            "weights; the lexical features add their cost per candidate, measured above on pooled MuSiQue);",
            "`+ann`: HNSW entries.",
            "",
        ]
        out += _scaling(payload)
    return "\n".join(out) + "\n"
