"""Retrieval time against question length: every query-side pass is linear in the question.

    python scripts/benchmarks/bench_query_length.py                      # docs/results/query_length.json
    python scripts/benchmarks/bench_query_length.py --lengths 10 100 1000 --repeats 3 --out /tmp/q.json

On the first LoCoMo conversation (hashing encoder, offline), each policy of ``--policies`` retrieves one
question of ``L`` words for each ``L`` of ``--lengths`` (10 ... 10^5 by default), under the default budget. The
question's words are drawn (seeded) from the conversation's own turns, so its tokens hit the graph's BM25
vocabulary and the lexical features; its embedding is computed before the clock starts (the encoder is not
retrieval). The router walks with an untrained scorer (its weights do not change what it computes, only what it
loads). Per policy and length: the median of ``--repeats`` retrievals, in seconds. Also measured: making the
:class:`~graphmem.core.retrieval.Query` of a question of twice :data:`~graphmem.core.retrieval.MAX_QUERY_TOKENS`
words, which is refused. The slope of log time against log length between ``10^3`` words and the longest
length is fitted per policy (1: linear; the query-kind pass was quadratic before, 102 s at 10^5 words). Writes the
JSON and a log-log plot beside it (``--plot``, default ``docs/query_length.png``).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.config.entry import command
from graphmem.core import Budget
from graphmem.core.retrieval import MAX_QUERY_TOKENS, Query, QueryTooLongError
from graphmem.index.embed import HashingEncoder
from graphmem.index.lexical import tokenize
from graphmem.policies import make_policy
from graphmem.policies.router import RouterPolicy
from graphmem.store.io import atomic_write, write_json
from models.walk_scorer import ScorerConfig, WalkScorer

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = [10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000]


def question(words: list[str], n: int, seed: int) -> str:
    """``n`` words drawn from ``words`` (seeded), capitalised now and then and cut into sentences."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        w = rng.choice(words)
        out.append(w.capitalize() if rng.random() < 0.1 else w)
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out) + "?"


def timed(policy, graph, query: Query, budget: Budget, repeats: int) -> float:
    """Median seconds of ``repeats`` retrievals of ``query``."""
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        policy.retrieve(graph, query, budget)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def slope(lengths: list[int], seconds: list[float], lo: int = 1_000) -> float | None:
    """Least-squares slope of log seconds against log length over the lengths from ``lo`` on."""
    pts = [(math.log(n), math.log(s)) for n, s in zip(lengths, seconds) if n >= lo and s > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    lengths = payload["lengths"]
    for name, row in payload["policies"].items():
        fitted = "" if row["slope"] is None else f" (slope {row['slope']:.2f})"
        ax.plot(lengths, row["seconds"], marker="o", label=name + fitted)
    top = max(max(r["seconds"]) for r in payload["policies"].values())
    ax.plot(lengths, [top * n / lengths[-1] for n in lengths], "k--", linewidth=0.8, label="linear (slope 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("question length (words)")
    ax.set_ylabel("retrieval time (s, median)")
    ax.set_title("Retrieval time against question length (LoCoMo conv-26)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=LENGTHS, help="question lengths in words")
    p.add_argument("--policies", nargs="+", default=["router", "bm25", "hybrid", "dense_topk"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "query_length.json")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "query_length.png")
    return p


def work(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Time each policy at each question length and write the results and the plot (module docstring)."""
    if args.repeats < 1 or min(args.lengths) < 1:
        raise ValueError("--repeats and every --lengths value must be positive")
    torch.set_num_threads(1)
    encoder = HashingEncoder()
    gs = build_graphset(DataConfig(name="locomo", limit=1), GraphConfig(encoder="hashing"), encoder, progress=False)
    graph = next(iter(gs.graphs.values()))
    words = sorted({w for text in graph.texts for w in re.findall(r"[A-Za-z]+", text) if tokenize(w)})  # one token
    budget = Budget()
    policies = {
        name: RouterPolicy(scorer=WalkScorer(ScorerConfig(dim=graph.dim)), device="cpu")
        if name == "router"
        else make_policy(name)
        for name in args.policies
    }
    lengths = sorted(args.lengths)
    texts = {n: question(words, n, seed=n) for n in lengths}
    queries = {n: Query(f"q{n}", t, encoder.encode([t])[0]) for n, t in texts.items()}
    rows = {name: {"seconds": []} for name in policies}
    for n in lengths:
        for name, policy in policies.items():
            rows[name]["seconds"].append(timed(policy, graph, queries[n], budget, args.repeats))
        print(f"{n:>7} words: " + ", ".join(f"{k} {v['seconds'][-1]:.4f}s" for k, v in rows.items()), flush=True)
    for row in rows.values():
        row["slope"] = slope(lengths, row["seconds"])
    too_long = question(words, 2 * MAX_QUERY_TOKENS, seed=0)
    t0 = time.perf_counter()
    try:
        Query("too-long", too_long, queries[lengths[0]].embedding)
        refused = None
    except QueryTooLongError as err:
        refused = str(err)
    payload = {
        "command": " ".join(["python scripts/benchmarks/bench_query_length.py", *(argv or sys.argv[1:])]),
        "graph": {"set": "locomo limit 1, hashing", "nodes": graph.num_nodes, "vocabulary_words": len(words)},
        "budget": {k: getattr(budget, k) for k in ("max_entries", "max_nodes", "max_tokens")},
        "threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),  # other work on the machine while it ran
        "repeats": args.repeats,
        "lengths": lengths,
        "query_tokens": [len(tokenize(texts[n])) for n in lengths],
        "policies": rows,
        "max_query_tokens": MAX_QUERY_TOKENS,
        "refused": {"words": 2 * MAX_QUERY_TOKENS, "seconds": round(time.perf_counter() - t0, 4), "error": refused},
    }
    write_json(args.out, payload, indent=1)
    plot(payload, args.plot)
    print(f"wrote {args.out} and {args.plot}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), functools.partial(work, argv=argv), argv)


if __name__ == "__main__":
    sys.exit(main())
