"""What reopening a large memory costs before its first add and its first retrieval: the indexes built from
the records, or loaded from the files a writer saved at close (:mod:`graphmem.store.memory_indexes`), one
thread.

A memory of ``--records`` note-like texts (:func:`graphmem.builders.synthetic.make_text_graph`, hashing
encoder, transactions of 10,000 records) is grown, searched once with ``hybrid`` (its BM25 and dense entry
index made) and closed. It is then opened ``--rounds`` times each way: ``built`` (the saved indexes removed
first) and ``loaded``; each round times the open, the first ``hybrid`` retrieval, the first add (the embedding
given) and the close, which saves the indexes for the next round.

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

from bench_memory import records  # the same records as the scale benchmark's

from graphmem import Memory
from graphmem.builders.synthetic import make_text_graph
from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.index.embed import HashingEncoder
from graphmem.store.io import write_json
from graphmem.store.memory_indexes import forget_indexes


def grow(folder: Path, texts: list[str], encoder: HashingEncoder) -> None:
    with Memory.open(folder, encoder="hashing") as mem:
        for start in range(0, len(texts), 10_000):
            stop = min(start + 10_000, len(texts))
            mem.add_many(records(texts, start, stop), encoder.encode(texts[start:stop]))
        mem.retrieve("a first question, so that the retrieval indexes are made")


def reopen(folder: Path, way: str, k: int, encoder: HashingEncoder) -> dict:
    """One round: open (after removing the saved indexes for ``built``), one retrieval, one add, close."""
    if way == "built":
        forget_indexes(folder)
    t = time.perf_counter()
    mem = Memory.open(folder, encoder="hashing")
    opened = time.perf_counter() - t
    t = time.perf_counter()
    mem.retrieve(f"a note about Lisbon, round {k}")
    retrieved = time.perf_counter() - t
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
        grow(root / "memory", make_text_graph(args.records, dim=16, seed=args.seed, validate=False).texts, encoder)
        report["grow_s"] = time.perf_counter() - t
        rounds = {
            way: [reopen(root / "memory", way, k, encoder) for k in range(args.rounds)] for way in ("built", "loaded")
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report["records"] = args.records
    report["rounds"] = rounds
    for way, rows in rounds.items():
        for key in ("open_s", "first_retrieve_s", "first_add_s", "close_s"):
            report[f"{way}_{key}_median"] = statistics.median(r[key] for r in rows)
    for key in ("first_add_s", "first_retrieve_s"):
        report[f"{key}_built_over_loaded"] = report[f"built_{key}_median"] / report[f"loaded_{key}_median"]
    report["load_average_at_end"] = os.getloadavg()
    write_json(args.out, report)
    print(
        f"after reopening, built / loaded: first retrieval {report['built_first_retrieve_s_median']:.2f} / "
        f"{report['loaded_first_retrieve_s_median']:.3f} s, first add {report['built_first_add_s_median']:.2f} / "
        f"{report['loaded_first_add_s_median']:.3f} s; written to {args.out}"
    )


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="reopenings each way")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/benchmark/memory_reopen.json")
    return ap


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
