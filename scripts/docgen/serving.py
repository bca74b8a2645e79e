"""``docs/serving.md``: served latency of the learned walk, from ``docs/results/serve_latency*.json``
(``scripts/benchmarks/bench_serve.py``, before and after the question-time path),
``docs/results/memory_scale.json`` (``scripts/benchmarks/bench_memory.py``, a live memory as it grows) and
``docs/results/serving_scaling.json`` (``scripts/benchmark.py +suite=scaling``, the walk beside beta_bfs at
each graph size)."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import after_add_cpu_s, fill, measuring_processes, read_json

PAGE = "serving"


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


GOAL_MS, GOAL_RATIO = 3.0, 4.0
"""the page's goal: router p50 at most this many ms, at most this many times beta_bfs (wall and CPU)"""


def _goal(r: dict) -> str:
    """Whether the run meets the page's goal (:data:`GOAL_MS`, :data:`GOAL_RATIO`)."""
    p50, wall, cpu = r["policies"]["router"]["p50_ms"], r["router_p50_over_beta_bfs"], r["router_cpu_p50_over_beta_bfs"]
    parts = [f"router p50 {p50:.2f} ms: {'met' if p50 <= GOAL_MS else 'not met'} (<= {GOAL_MS:g} ms)"]
    ratio = max(wall, cpu)
    parts.append(f"{ratio:.1f}x beta_bfs: {'met' if ratio <= GOAL_RATIO else 'not met'} (<= {GOAL_RATIO:g}x)")
    return fill(PAGE, "goal", parts="; ".join(parts))


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


def _memory(payload: dict) -> list[str]:
    """The served walk on a live memory as it grows (``memory_scale.json``, ``scripts/benchmarks/bench_memory.py``)."""
    load = ", ".join(f"{x:.1f}" for x in payload["load_average_at_start"])
    lines = [
        fill(PAGE, "memory", command=payload["command"], load=load),
        "",
        "| records | router p50 ms | CPU p50 ms | CPU ×10³ | hybrid CPU p50 ms "
        "| retrieval after an add: CPU p50 / mean s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in payload["sizes"]:
        router, after = s["retrieve_router"], (after_add_cpu_s(s), after_add_cpu_s(s, "mean"))
        lines.append(
            f"| {s['records']:,} | {router['p50_ms']:.2f} | {router['cpu']['p50_ms']:.2f} | "
            f"{s['retrieve_router_cpu_p50_over_first']:.2f} | {s['retrieve_hybrid']['cpu']['p50_ms']:.2f} | "
            + (f"{after[0]:.3f} / {after[1]:.3f} |" if after[0] is not None else "— |")
        )
    runs = measuring_processes(payload)
    if runs > 1:
        lines += [
            "",
            f"Each size's figures are the medians of {runs} measuring processes (each one's: `docs/memory.md`).",
        ]
    return lines


def render(results_dir: Path) -> str:
    """The whole page: the prose, the served latencies before and after, the scale sweep."""
    results_dir = Path(results_dir)
    out = [fill(PAGE, "prose"), "", fill(PAGE, "served"), ""]
    runs = [(n, results_dir / f) for n, f in (("now", "serve_latency.json"), ("before", "serve_latency_before.json"))]
    runs = [(n, read_json(p)) for n, p in runs if p.is_file()]
    for name, payload in runs:
        out.append(f"* {name}: `{payload['command']}`" + (f" ({payload['code']})" if payload.get("code") else ""))
    out += [
        "",
        fill(PAGE, "served_lead"),
        "",
        "| run | policy | questions | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms | threads | load average |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, payload in runs:
        out += _served(name, payload)
    if runs and "router_p50_over_router_batched" in runs[0][1]:
        r = runs[0][1]
        ratios = {
            "batched": f"{r['router_p50_over_router_batched']:.2f}",
            "batched_cpu": f"{r['router_cpu_p50_over_router_batched']:.2f}",
            "beta": f"{r['router_p50_over_beta_bfs']:.2f}",
            "beta_cpu": f"{r['router_cpu_p50_over_beta_bfs']:.2f}",
            "same": r["router_loads_what_router_batched_loads"],
            "ranked": r.get("router_ranks_what_router_batched_ranks", "not measured"),
        }
        out += ["", fill(PAGE, "ratios", **ratios), "", _goal(r)]
    path = results_dir / "memory_scale.json"
    if path.is_file():
        out += ["", *_memory(read_json(path))]
    path = results_dir / "serving_scaling.json"
    if path.is_file():
        payload = read_json(path)
        load = [", ".join(f"{x:.1f}" for x in payload[k]) for k in ("load_average_at_start", "load_average_at_end")]
        out += ["", fill(PAGE, "scale", command=payload["command"], start=load[0], end=load[1]), ""]
        out += _scaling(payload)
    return "\n".join(out) + "\n"
