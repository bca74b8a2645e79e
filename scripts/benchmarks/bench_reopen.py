"""What reopening a large memory costs before its first add and its first retrieval: its derived state read from
the database's rows or loaded from the state a writer saved at close (:mod:`graphmem.store.memory_state`), and
its indexes built from the records or loaded from the files saved beside it (:mod:`graphmem.store.
memory_indexes`), one thread.

A memory of ``--records`` note-like texts (:func:`graphmem.builders.synthetic.make_text_graph`, hashing
encoder, transactions of 10,000 records) is grown, searched once with ``hybrid`` (its BM25 and dense entry
index made) and closed; or ``--memory`` names a closed memory, whose copy is reopened instead. It is then
opened ``--rounds`` times each way of ``--ways``: ``built`` (every saved file removed first: the state read from
the rows, the indexes built when first needed), ``rows`` (the saved state removed: read from the rows, the
indexes loaded) and ``loaded`` (both loaded); each round times the open, the first ``hybrid`` retrieval, with
``--walk`` the shipped walk's first retrieval after it (``--checkpoint``'s weights, else a fresh scorer of that
shape; it makes the walk's per-graph tables: the pair table, the scorer's static tensors), the first add (the
embedding given) and the close, which saves the state and indexes for the next round.

    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_reopen.py --out docs/results/memory_reopen.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_memory import records, walk_policy  # the same records and walk as the scale benchmark's

from graphmem import Memory
from graphmem.builders.synthetic import make_text_graph
from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.index.embed import HashingEncoder
from graphmem.store.io import write_json
from graphmem.store.memory_indexes import forget_indexes
from graphmem.store.memory_state import state_path


def grow(folder: Path, texts: list[str], encoder: HashingEncoder) -> None:
    with Memory.open(folder, encoder="hashing") as mem:
        for start in range(0, len(texts), 10_000):
            stop = min(start + 10_000, len(texts))
            mem.add_many(records(texts, start, stop), encoder.encode(texts[start:stop]))
        mem.retrieve("a first question, so that the retrieval indexes are made")


WAYS = ("built", "rows", "loaded")


def reopen(folder: Path, way: str, k: int, encoder: HashingEncoder, walk=None) -> dict:
    """One round: open (after removing the saved files ``way`` does without), one retrieval (and one by ``walk``),
    one add, close."""
    if way == "built":
        forget_indexes(folder)
    elif way == "rows":
        state_path(folder).unlink(missing_ok=True)
    t = time.perf_counter()
    mem = Memory.open(folder, encoder="hashing")
    opened = time.perf_counter() - t
    if mem.state_loaded != (way == "loaded"):
        raise RuntimeError(f"round {k} ({way}): the saved state was {'not ' * (way == 'loaded')}loaded")
    t = time.perf_counter()
    mem.retrieve(f"a note about Lisbon, round {k}")
    retrieved = time.perf_counter() - t
    walked = None
    if walk is not None:
        t = time.perf_counter()
        mem.retrieve(f"a walk to a note about Lisbon, round {k}", policy=walk)
        walked = time.perf_counter() - t
    text = f"a note added after reopening, {way} round {k}, about Lisbon"
    t = time.perf_counter()
    mem.add(text, id=f"{way}-{k}", embedding=encoder.encode([text])[0])
    added = time.perf_counter() - t
    t = time.perf_counter()
    mem.close()
    closed = time.perf_counter() - t
    return {
        "records": len(mem),
        "open_s": opened,
        "first_retrieve_s": retrieved,
        **({"first_walk_s": walked} if walk is not None else {}),
        "first_add_s": added,
        "close_s": closed,
    }


def work(args: argparse.Namespace) -> None:
    """Grow the memory, reopen it both ways and write the report (module docstring)."""
    if args.records < 1 or args.rounds < 1:
        raise ValueError(f"--records and --rounds must be positive (got {args.records}, {args.rounds})")
    threads = set_threads({"threads": args.threads})
    report = {"command": "python " + " ".join(sys.argv), "threads": threads, "load_average_at_start": os.getloadavg()}
    encoder = HashingEncoder(384)
    root = Path(tempfile.mkdtemp(prefix="memory-reopen-"))
    try:
        t = time.perf_counter()
        if args.memory:
            shutil.copytree(args.memory, root / "memory", ignore=shutil.ignore_patterns("writer.lock", "grown.json"))
            os.sync()  # the copy written back before the rounds, so that they do not time the kernel's writes
        else:
            texts = make_text_graph(args.records, dim=16, seed=args.seed, validate=False).texts
            grow(root / "memory", texts, encoder)
        report["grow_s" if not args.memory else "copy_s"] = time.perf_counter() - t
        walk = walk_policy(args.checkpoint) if args.walk or args.checkpoint else None
        folder = root / "memory"
        rounds = {way: [reopen(folder, way, k, encoder, walk) for k in range(args.rounds)] for way in args.ways}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report["records"] = rounds[args.ways[0]][0]["records"] - 1  # before the round's add
    report["rounds"] = rounds
    if args.memory:
        report["memory"] = args.memory
    if args.checkpoint:
        report["checkpoint"] = args.checkpoint
    for way, rows in rounds.items():
        for key in ("open_s", "first_retrieve_s", "first_add_s", "close_s", *(["first_walk_s"] if walk else [])):
            report[f"{way}_{key}_median"] = statistics.median(r[key] for r in rows)
    for key, (slow, fast) in (("open_s", ("rows", "loaded")), ("first_retrieve_s", ("built", "rows"))):
        if slow in rounds and fast in rounds:
            report[f"{key}_{slow}_over_{fast}"] = report[f"{slow}_{key}_median"] / report[f"{fast}_{key}_median"]
    report["load_average_at_end"] = os.getloadavg()
    write_json(args.out, report)
    print(
        ", ".join(f"{way}: open {report[f'{way}_open_s_median']:.2f} s" for way in rounds) + f"; written to {args.out}"
    )


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--memory", help="a closed memory to reopen a copy of, instead of growing one")
    ap.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS), help="what each round loads (docstring)")
    ap.add_argument("--rounds", type=int, default=3, help="reopenings each way")
    ap.add_argument("--walk", action="store_true", help="each round also times the walk's first retrieval")
    ap.add_argument("--checkpoint", help="the walk's trained weights (implies --walk)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/benchmark/memory_reopen.json")
    return ap


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
