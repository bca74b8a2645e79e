"""What a live memory costs as it grows: add, retrieve and forget latency, open time, resident memory and ingest
rate, one thread.

One memory (``graphmem.Memory``, hashing encoder, the shipped graph settings) grows through each size of
``--sizes`` (note-like texts of :func:`graphmem.builders.synthetic.make_text_graph`, 20 turns a session,
30 s apart, added in transactions of ``--chunk`` records with their embeddings given, so the encoder's cost is
apart). Each size is grown by one process and measured by another, started fresh, so that every size is
measured as a process that opens the memory finds it (and the resident memory is that of this size alone), on a
copy of the memory as grown (the measuring process's writes leave it as it was). ``--keep`` keeps each size's copy
(``--folder/grown-N``), and ``--reuse`` measures those copies again, with the code of the day, instead of growing
them (their growth figures are then those of the run that grew them, marked ``reused``):

* ``open_s``: opening the memory (the database read, the graph and the builder's state rebuilt), the resident
  memory after it, and the first add (``first_add_after_open_s``: the vector index is built then when the
  memory's saved one was not for these records);
* ``add``: ``--adds`` single :meth:`Memory.add` calls (one transaction each, the embedding given), wall and
  thread-CPU p50 / p95 (the encoder's own time per text is reported apart, ``encode_ms``);
* ``retrieve``: ``--queries`` queries quoting four words of a random record, served one at a time by the walk
  as ``configs/policy/router.yaml`` ships it (hybrid entries, lexical features, ranking head): the trained
  ``--checkpoint`` (its weights read the hashing encoder's vectors here: where the walk stops and what it
  loads depend on them, the cost of a step does not), else a freshly initialised scorer of the trained shape,
  after one untimed call that builds the per-graph tables and indexes (its time is ``first_retrieve_s``); and
  ``hybrid`` likewise; with the candidate edges each scored per query (``edges_considered``, mean) and the
  graph's out-degrees (``out_degree``: mean, p99, max), what the walk's read grows with;
* ``retrieve_router_gathered``: the same walk on the same queries with its per-query node columns computed node by
  node from gathered vector rows at every size (:func:`gathered_columns`), the path it takes on every graph of more
  than ``ONE_QUERY_NODES`` records: below that size it computes every node's columns at once from one dense
  cosine row, so this is the walk's cost at each size by one path;
* ``retrieve_after_add_router``: ``--after-adds`` times, one more add, then one router retrieval (wall and
  thread-CPU p50 / p95): what a write costs the next read, the per-graph tables being grown or made again (the
  indexes brought up to date);
* ``forget``: ``--forgets`` single :meth:`Memory.forget` calls of records added in this process;
* the database's bytes and the measuring process's peak resident memory.

``--repeats R`` measures each size by ``R`` such processes, one after another, each on a fresh copy: every number
of the size's row is then their median, and ``runs`` keeps each process's p50s and open time (the run-to-run
spread). Ratios to the first size are reported for the add and retrieve p50s (medians with ``R > 1``).
``--ingest`` turns of LoCoMo are then added with the real encoder (MiniLM) in transactions of 64, for the ingest
rate in turns per second. The report is written after each growth and each size, and the measuring process saves
its row after each step (the walk's, whose per-graph tables take most of the resident memory, last): a run stopped
at a large size keeps what it had measured, and says where it stopped.

    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_memory.py --out docs/results/memory_scale.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

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
from models import walk_scorer
from models.rank_head import RankHead, RankHeadConfig
from models.walk_scorer import ScorerConfig, WalkScorer

EXTRA = 3
"""records a measuring process adds beyond ``--adds`` and ``--after-adds`` (the first add, spares)"""


def timed(call) -> tuple[float, float]:
    """``(wall s, thread CPU s)`` of ``call()``."""
    w, c = time.perf_counter(), time.thread_time()
    call()
    return time.perf_counter() - w, time.thread_time() - c


def summary(samples: list[tuple[float, float]]) -> dict:
    return {**latency_summary([w for w, _ in samples]), "cpu": latency_summary([c for _, c in samples])}


def resident_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def texts_for(args) -> list[str]:
    """Every text of the run: ``max(sizes)`` to grow the memory, then :func:`per_size` per size to measure."""
    top = max(args.sizes) + len(args.sizes) * per_size(args)
    texts = make_text_graph(top, dim=16, seed=args.seed, validate=False).texts
    gc.collect()
    return texts


def per_size(args) -> int:
    """Records a measuring process adds."""
    return args.adds + args.after_adds + EXTRA


def records(texts: list[str], start: int, stop: int, prefix: str = "n") -> list[dict]:
    return [dict(text=texts[i], id=f"{prefix}{i}", session=i // 20, time=1e9 + 30.0 * i) for i in range(start, stop)]


def grow(args) -> dict:
    """Grow the memory from ``--start`` to ``--stop`` records (the encoder's time left out)."""
    texts, encoder, spent = texts_for(args), HashingEncoder(384), 0.0
    with Memory.open(args.folder, encoder="hashing") as mem:
        for start in range(args.start, args.stop, args.chunk):
            stop = min(start + args.chunk, args.stop)
            emb = encoder.encode(texts[start:stop])
            spent += timed(lambda s=start, e=stop, x=emb: mem.add_many(records(texts, s, e), x))[0]
    return {"fill_s": spent, "fill_records_per_s": (args.stop - args.start) / max(spent, 1e-9)}


def measure_texts(args) -> dict:
    """Write the records each measuring process adds (after those that grow the memory), one file per size."""
    texts, sizes = texts_for(args), sorted(args.sizes)
    for k, size in enumerate(sizes):
        base = sizes[-1] + k * per_size(args)
        (Path(args.folder).parent / f"measure-{size}.json").write_text(json.dumps(texts[base : base + per_size(args)]))
    return {}


def measure(args) -> dict:
    """Open the memory grown to ``--stop`` records in this fresh process and time it (module docstring); the row
    so far is saved to ``--row`` after each step, the walk's last (its per-graph tables are the largest part of
    the resident memory): a process stopped on the way leaves the figures it had."""
    mine = json.loads(Path(args.texts).read_text())  # the parent's texts: this process's peak is the memory's
    emb = HashingEncoder(384).encode(mine)
    router = walk_policy(args.checkpoint)
    mine = records(mine, 0, len(mine), prefix=f"m{args.stop}-")
    out: dict = {}

    def step(name: str) -> None:
        out["last_step"] = name
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        write(args.row, out)

    wall = time.perf_counter()
    mem = Memory.open(args.folder, encoder="hashing")
    out["open_s"], out["rss_after_open_mb"] = time.perf_counter() - wall, resident_mb()
    out["first_add_after_open_s"] = timed(lambda: mem.add(**mine[0], embedding=emb[0]))[0]
    out["add"] = summary([timed(lambda i=i: mem.add(**mine[i], embedding=emb[i])) for i in range(1, args.adds + 1)])
    out["records"] = len(mem)
    degree = np.bincount(mem.graph.edge_index[0].numpy(), minlength=len(mem))  # what the walk's reads grow with
    out["out_degree"] = {
        "mean": float(degree.mean()),
        "p99": float(np.percentile(degree, 99)),
        "max": int(degree.max()),
    }
    rng, texts = random.Random(args.seed + args.stop), mem.graph.texts
    queries = [" ".join(texts[rng.randrange(len(texts))].split()[:4]) for _ in range(args.queries)]
    gone = [r["id"] for r in mine[1 : 1 + args.forgets]]
    out["forget"] = summary([timed(lambda r=r: mem.forget(r)) for r in gone])
    step("forget")
    for name, policy in (("hybrid", mem.policy), ("router", router)):
        out[f"first_retrieve_s_{name}"] = timed(lambda p=policy: mem.retrieve(queries[0], policy=p))[0]
        step(f"first retrieve {name}")
        considered: list[int] = []
        out[f"retrieve_{name}"] = summary(
            [
                timed(lambda q=q, p=policy: considered.append(mem.retrieve(q, policy=p).edges_considered))
                for q in queries
            ]
        )
        out[f"edges_considered_{name}"] = sum(considered) / len(considered)
        out[f"rss_after_retrieve_{name}_mb"] = resident_mb()
        step(f"retrieve {name}")
    with gathered_columns():
        out["retrieve_router_gathered"] = summary([timed(lambda q=q: mem.retrieve(q, policy=router)) for q in queries])
    step("retrieve router gathered")
    after = []  # one more add, then one retrieval: the per-graph tables grown or made again after a write
    for j, i in enumerate(range(args.adds + 1, args.adds + 1 + args.after_adds)):
        mem.add(**mine[i], embedding=emb[i])
        after.append(timed(lambda q=queries[(j + 1) % len(queries)]: mem.retrieve(q, policy=router)))
    out["retrieve_after_add_router"] = summary(after)
    out["bytes"] = mem.stats()["bytes"]
    mem.close()
    out["rss_mb"] = resident_mb()
    step("close")
    return out


@contextlib.contextmanager
def gathered_columns():
    """Within: the walk computes a query's node columns node by node from gathered vector rows on a graph of any
    size (:class:`models.walk_columns.NodeColumns`), as it does above ``ONE_QUERY_NODES`` records, instead of every
    node's at once from one dense cosine row."""
    saved = walk_scorer.ONE_QUERY_NODES, walk_scorer.SPAN_PAIRS
    walk_scorer.ONE_QUERY_NODES = walk_scorer.SPAN_PAIRS = 0
    try:
        yield
    finally:
        walk_scorer.ONE_QUERY_NODES, walk_scorer.SPAN_PAIRS = saved


def walk_policy(checkpoint: str | None):
    """The shipped walk: the trained scorer and ranking head of ``checkpoint``, else fresh ones of that shape."""
    if checkpoint:
        return make_policy("router", checkpoint=checkpoint, entry_selector="hybrid", device="cpu")
    return make_policy(
        "router",
        scorer=WalkScorer(ScorerConfig(dim=384)),
        rank_head=RankHead(RankHeadConfig(NUM_RANK_FEATURES)),
        entry_selector="hybrid",
        device="cpu",
    )


def phase(args, name: str, start: int, stop: int, folder: Path) -> dict:
    """Run one phase (``grow``, ``measure`` or ``texts``) in a fresh process; its report is the last line it prints,
    or for a measuring process that stopped, the row it saved (with ``stopped``: its exit code)."""
    argv = [sys.executable, __file__, "--phase", name, "--start", str(start), "--stop", str(stop)]
    argv += ["--folder", str(folder), "--sizes", *map(str, args.sizes), "--seed", str(args.seed)]
    argv += ["--adds", str(args.adds), "--queries", str(args.queries), "--chunk", str(args.chunk)]
    argv += ["--forgets", str(args.forgets), "--after-adds", str(args.after_adds), "--threads", str(args.threads)]
    argv += ["--checkpoint", args.checkpoint] if args.checkpoint else []
    row = folder.parent / f"row-{stop}.json"
    argv += ["--texts", str(folder.parent / f"measure-{stop}.json"), "--row", str(row)] if name == "measure" else []
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    if name == "measure" and row.is_file():
        return {**json.loads(row.read_text()), "stopped": f"exit code {done.returncode}"}
    raise RuntimeError(f"the {name} phase of {stop:,} records stopped with exit code {done.returncode}")


def run(args, head: dict) -> dict:
    sizes = sorted(args.sizes)
    encoder = HashingEncoder(384)
    sample = make_text_graph(200, dim=16, seed=args.seed, validate=False).texts
    report: dict = {"encode_ms": summary([timed(lambda t=t: encoder.encode([t])) for t in sample]), "sizes": []}
    report["checkpoint"] = args.checkpoint
    root = Path(args.folder or tempfile.mkdtemp(prefix="memory-bench-"))
    growing, measured = root / "memory", root / "measured"
    root.mkdir(parents=True, exist_ok=True)
    phase(args, "texts", 0, 0, growing)
    have, kept = 0, {size: root / f"grown-{size}" for size in sizes}
    if not (args.reuse and all((kept[s] / "grown.json").is_file() for s in sizes)):
        shutil.rmtree(growing, ignore_errors=True)
    for size in sizes:
        if args.reuse and (kept[size] / "grown.json").is_file():
            row = {**json.loads((kept[size] / "grown.json").read_text()), "reused": True}
        else:
            if args.reuse and have and not growing.exists():
                copy_memory(kept[sizes[sizes.index(size) - 1]], growing)
            row = phase(args, "grow", have, size, growing)
            if args.keep:  # the grown memory as it was, for a later --reuse
                copy_memory(growing, kept[size])
                write(kept[size] / "grown.json", {**row, "grown_by": head["command"], "at": time.ctime()})
        report["sizes"].append(row)
        write(args.out, {**head, **report})  # the growth's figures stay if the measuring process stops
        runs: list[dict] = []
        while len(runs) < args.repeats and not (runs and "stopped" in runs[-1]):
            copy_memory(kept[size] if args.reuse and kept[size].is_dir() else growing, measured)
            # a copy: its writes leave the grown one as it was
            runs.append(phase(args, "measure", have, size, measured))
            shutil.rmtree(measured, ignore_errors=True)
        row.update(median_of_runs(runs))
        have = size
        ratios(report["sizes"])
        write(args.out, {**head, **report})
        print(json.dumps({k: v for k, v in row.items() if not isinstance(v, dict)}), flush=True)
        if "stopped" in row:
            print(f"  the measuring process stopped after '{row['last_step']}' ({row['stopped']})", flush=True)
            break
    if args.ingest:
        report["ingest"] = ingest(args.ingest, Path(tempfile.mkdtemp(prefix="memory-ingest-")))
    if not args.folder:
        shutil.rmtree(root, ignore_errors=True)
    return report


def copy_memory(src: Path, dst: Path) -> None:
    """Copy a closed memory's folder (its database and saved indexes) to ``dst``, replacing what was there, and
    write every dirty page back: the kernel writes a large copy back for minutes, and a measuring process started
    before it is done would time that work on the shared cores with its own."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("grown.json", "writer.lock"))
    os.sync()


TIMED = ("add", "forget", "retrieve_hybrid", "retrieve_router", "retrieve_router_gathered", "retrieve_after_add_router")
"""the timed calls of a measuring process's row"""


def median_of_runs(runs: list[dict]) -> dict:
    """One size's row from its measuring processes: every number (each latency statistic, wall and CPU, open time,
    resident memory, bytes) the median over the processes, any other field the last process's; with more than one,
    ``runs`` keeps each process's wall p50s and open time, the run-to-run spread."""
    if len(runs) == 1:
        return runs[0]
    out = _median(runs)
    out["runs"] = [{**{k: r[k]["p50_ms"] for k in TIMED if k in r}, "open_s": r.get("open_s")} for r in runs]
    return out


def _median(values: list):
    """The median of numbers (of integers, the lower median: one of them), key by key for mappings (the keys of
    any), else the last value."""
    if isinstance(values[-1], dict):
        keys = dict.fromkeys(k for v in values for k in v)
        return {k: _median([v[k] for v in values if k in v]) for k in keys}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return statistics.median_low(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return statistics.median(values)
    return values[-1]


def ratios(rows: list[dict]) -> None:
    first = rows[0]
    for row in rows:
        keys = ("add", "retrieve_router", "retrieve_router_gathered", "retrieve_hybrid")
        for key in [k for k in keys if k in row and k in first]:
            row[f"{key}_p50_over_first"] = row[key]["p50_ms"] / first[key]["p50_ms"]
            row[f"{key}_cpu_p50_over_first"] = row[key]["cpu"]["p50_ms"] / first[key]["cpu"]["p50_ms"]


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
    ap.add_argument("--forgets", type=int, default=5, help="timed single forgets per size (at most --adds)")
    ap.add_argument("--after-adds", type=int, default=5, help="timed add-then-retrieve pairs per size")
    ap.add_argument("--chunk", type=int, default=10000, help="records per transaction while growing")
    ap.add_argument(
        "--repeats", type=int, default=1, help="measuring processes per size, one after another (figures: their median)"
    )
    ap.add_argument("--ingest", type=int, default=2000, help="LoCoMo turns added with MiniLM (0: skip)")
    ap.add_argument(
        "--checkpoint", default=None, help="a trained walk (best.pt of scripts/train.py; default: a fresh scorer)"
    )
    ap.add_argument("--folder", default=None, help="where the memory grows (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep a copy of the memory at each size (--folder/grown-N)")
    ap.add_argument(
        "--reuse", action="store_true", help="measure the copies --keep left in --folder instead of growing them again"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/benchmark/memory_scale.json")
    ap.add_argument("--phase", choices=("all", "grow", "measure", "texts"), default="all", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--texts", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--row", default=None, help=argparse.SUPPRESS)
    return ap


def work(args: argparse.Namespace) -> None:
    """Grow the memory, time it at each size and write the report (module docstring); or run one phase."""
    bad = [s for s in args.sizes if s < 1] + [
        v for v in (args.adds, args.queries, args.chunk, args.after_adds, args.repeats) if v < 1
    ]
    if bad or args.ingest < 0 or not 0 <= args.forgets <= args.adds:
        raise ValueError(
            "sizes, --adds, --queries, --chunk, --after-adds and --repeats must be positive, --ingest >= 0, "
            f"0 <= --forgets <= --adds "
            f"(got {bad or [args.ingest, args.forgets]})"
        )
    threads = set_threads({"threads": args.threads})
    if args.phase != "all":
        print(json.dumps({"grow": grow, "measure": measure, "texts": measure_texts}[args.phase](args)), flush=True)
        return
    report = {"command": "python " + " ".join(sys.argv), "threads": threads, "load_average_at_start": os.getloadavg()}
    report["dense_row_records"] = walk_scorer.ONE_QUERY_NODES  # the largest memory the walk reads by one dense row
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
