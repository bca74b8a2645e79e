"""What a live memory costs as it grows: add and retrieve latency, open time and ingest rate, one thread.

One memory (``graphmem.Memory``, hashing encoder, the shipped graph settings) grows through each size of
``--sizes`` (note-like texts of :func:`graphmem.builders.synthetic.make_text_graph`, 20 turns a session,
30 s apart, added in transactions of ``--chunk`` records with their embeddings given, so the encoder's cost is
apart). At each size:

* ``add``: ``--adds`` single :meth:`Memory.add` calls (one transaction each, the embedding given), wall and
  thread-CPU p50 / p95 (the encoder's own time per text is reported apart, ``encode_ms``);
* ``retrieve``: ``--queries`` queries quoting four words of a random record, served one at a time by the walk
  as ``configs/policy/router.yaml`` ships it (hybrid entries, lexical features, ranking head): the trained
  ``--checkpoint`` (its weights read the hashing encoder's vectors here: where the walk stops and what it
  loads depend on them, the cost of a step does not), else a freshly initialised scorer of the trained shape,
  after one untimed call that builds the per-graph tables and indexes (its time is ``first_retrieve_s``); and
  ``hybrid`` likewise;
* ``retrieve_after_add_router``: one more add, then one router retrieval (wall and thread-CPU seconds): what a
  write costs the next read, the per-graph tables being made again (the indexes brought up to date);
* ``open_s``: closing the memory and opening it again (the database read, the graph and the builder's state
  rebuilt), and the first add after it (``first_add_after_open_s``: the neighbour index is built then);
* the database's bytes and the process's peak resident memory.

Ratios to the first size are reported for the add and retrieve p50s. ``--ingest`` turns of LoCoMo are then
added with the real encoder (MiniLM) in transactions of 64, for the ingest rate in turns per second.

    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_memory.py --out docs/results/memory_scale.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from graphmem import Memory
from graphmem.builders.locomo import turn_records
from graphmem.builders.synthetic import make_text_graph
from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file
from graphmem.eval.latency import latency_summary
from graphmem.index.embed import HashingEncoder
from graphmem.policies import make_policy
from graphmem.policies.rank_features import NUM_RANK_FEATURES
from graphmem.store.io import atomic_write
from models.rank_head import RankHead, RankHeadConfig
from models.walk_scorer import ScorerConfig, WalkScorer


def timed(call) -> tuple[float, float]:
    """``(wall s, thread CPU s)`` of ``call()``."""
    w, c = time.perf_counter(), time.thread_time()
    call()
    return time.perf_counter() - w, time.thread_time() - c


def summary(samples: list[tuple[float, float]]) -> dict:
    return {**latency_summary([w for w, _ in samples]), "cpu": latency_summary([c for _, c in samples])}


def records(texts: list[str], start: int, stop: int) -> list[dict]:
    return [dict(text=texts[i], id=f"n{i}", session=i // 20, time=1e9 + 30.0 * i) for i in range(start, stop)]


def measure(mem: Memory, texts, emb, size: int, args, rng: random.Random, router, hybrid) -> dict:
    out: dict = {"records": size}
    adds = []
    for r, i in zip(records(texts, size, size + args.adds), range(size, size + args.adds)):
        adds.append(timed(lambda r=r, i=i: mem.add(**r, embedding=emb[i])))
    out["add"] = summary(adds)
    queries = [" ".join(texts[rng.randrange(size)].split()[:4]) for _ in range(args.queries)]
    for name, policy in (("router", router), ("hybrid", hybrid)):
        out[f"first_retrieve_s_{name}"] = timed(lambda p=policy: mem.retrieve(queries[0], policy=p))[0]
        out[f"retrieve_{name}"] = summary([timed(lambda q=q, p=policy: mem.retrieve(q, policy=p)) for q in queries])
    i = size + args.adds  # one more add, then one retrieval: the per-graph tables made again after a write
    mem.add(**records(texts, i, i + 1)[0], embedding=emb[i])
    wall, cpu = timed(lambda: mem.retrieve(queries[1], policy=router))
    out["retrieve_after_add_router"] = {"wall_s": wall, "cpu_s": cpu}
    out["bytes"] = mem.stats()["bytes"]
    return out


def run(args, head: dict) -> dict:
    sizes = sorted(args.sizes)
    top = sizes[-1] + len(sizes) * (args.adds + 2)
    t0 = time.perf_counter()
    graph = make_text_graph(top, dim=16, seed=args.seed, validate=False)
    texts = graph.texts
    encoder = HashingEncoder(384)
    emb = torch.cat([encoder.encode(texts[i : i + 20000]) for i in range(0, top, 20000)])
    encode = [timed(lambda t=t: encoder.encode([t])) for t in texts[:200]]
    report: dict = {"texts_s": time.perf_counter() - t0, "encode_ms": summary(encode), "sizes": []}
    if args.checkpoint:  # the shipped walk: the trained scorer and ranking head
        router = make_policy("router", checkpoint=args.checkpoint, entry_selector="hybrid", device="cpu")
        report["checkpoint"] = args.checkpoint
    else:
        router = make_policy(
            "router",
            scorer=WalkScorer(ScorerConfig(dim=384)),
            rank_head=RankHead(RankHeadConfig(NUM_RANK_FEATURES)),
            entry_selector="hybrid",
            device="cpu",
        )
    folder = Path(args.folder or tempfile.mkdtemp(prefix="memory-bench-")) / "memory"
    shutil.rmtree(folder, ignore_errors=True)
    rng, mem, have = random.Random(args.seed), Memory.open(folder, encoder="hashing"), 0
    hybrid = mem.policy
    for size in sizes:
        t1 = time.perf_counter()
        for start in range(have, size, args.chunk):
            stop = min(start + args.chunk, size)
            mem.add_many(records(texts, start, stop), emb[start:stop])
        fill = time.perf_counter() - t1
        row = {"fill_s": fill, "fill_records_per_s": (size - have) / max(fill, 1e-9)}
        row.update(measure(mem, texts, emb, size, args, rng, router, hybrid))
        have = size + args.adds + 1
        mem.close()
        row["open_s"] = timed(lambda: None)[0]
        w = time.perf_counter()
        mem = Memory.open(folder, encoder="hashing")
        row["open_s"] = time.perf_counter() - w
        row["first_add_after_open_s"] = timed(
            lambda: mem.add(**records(texts, have, have + 1)[0], embedding=emb[have])
        )[0]
        have += 1
        row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        report["sizes"].append(row)
        print(json.dumps({k: v for k, v in row.items() if not isinstance(v, dict)}), flush=True)
        print(
            f"  add p50 {row['add']['p50_ms']:.3f} ms  router p50 {row['retrieve_router']['p50_ms']:.3f} ms  "
            f"retrieve after an add {row['retrieve_after_add_router']['cpu_s']:.3f} s CPU",
            flush=True,
        )
    mem.close()
    first = report["sizes"][0]
    for row in report["sizes"]:
        for key in ("add", "retrieve_router", "retrieve_hybrid"):
            row[f"{key}_p50_over_first"] = row[key]["p50_ms"] / first[key]["p50_ms"]
            row[f"{key}_cpu_p50_over_first"] = row[key]["cpu"]["p50_ms"] / first[key]["cpu"]["p50_ms"]
    if args.ingest:  # the sizes' figures are written first: they stay if the ingest fails
        write(args.out, {**head, **report})
        report["ingest"] = ingest(args.ingest, Path(tempfile.mkdtemp(prefix="memory-ingest-")))
    if not args.folder:
        shutil.rmtree(folder.parent, ignore_errors=True)
    return report


def ingest(n: int, folder: Path) -> dict:
    """Turns per second with the real encoder (MiniLM), LoCoMo turns in transactions of 64."""
    convs, _, _ = load_locomo(data_file("locomo/locomo_dev8.json"))
    recs = [  # a turn's id and session are its conversation's: dia_ids repeat across conversations
        dataclasses.replace(r, id=f"{c.sample_id}:{r.id}", session=f"{c.sample_id}:{r.session}")
        for c in convs
        for r in turn_records(c)
    ][:n]
    with Memory.open(folder / "memory", encoder="minilm") as mem:
        mem.add("warm the encoder up", id="warm-up")
        t = time.perf_counter()
        for i in range(0, len(recs), 64):
            mem.add_many(recs[i : i + 64])
        wall = time.perf_counter() - t
    shutil.rmtree(folder, ignore_errors=True)
    return {"turns": len(recs), "wall_s": wall, "turns_per_s": len(recs) / wall, "encoder": "minilm"}


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000, 1000000])
    ap.add_argument("--adds", type=int, default=200, help="timed single adds per size")
    ap.add_argument("--queries", type=int, default=100, help="timed retrievals per size and policy")
    ap.add_argument("--chunk", type=int, default=10000, help="records per transaction while growing")
    ap.add_argument("--ingest", type=int, default=2000, help="LoCoMo turns added with MiniLM (0: skip)")
    ap.add_argument(
        "--checkpoint", default=None, help="a trained walk (best.pt of scripts/train.py; default: a fresh scorer)"
    )
    ap.add_argument("--folder", default=None, help="where the memory grows (default: a temporary folder)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/benchmark/memory_scale.json")
    return ap


def work(args: argparse.Namespace) -> None:
    """Grow the memory, time it at each size and write the report (module docstring)."""
    bad = [s for s in args.sizes if s < 1] + [v for v in (args.adds, args.queries, args.chunk) if v < 1]
    if bad or args.ingest < 0:
        raise ValueError(f"sizes, --adds, --queries and --chunk must be positive, --ingest >= 0 (got {bad})")
    threads = set_threads({"threads": args.threads})
    report = {"command": "python " + " ".join(sys.argv), "threads": threads, "load_average_at_start": os.getloadavg()}
    report.update(run(args, report))
    report["load_average_at_end"] = os.getloadavg()
    write(args.out, report)
    print(f"written to {args.out}")


def write(path: str, report: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=1)))


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
