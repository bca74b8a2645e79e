"""Build time against the length of one turn or passage: the graph builders are linear in the text.

    OMP_NUM_THREADS=1 python scripts/benchmarks/build_scaling.py          # 10 kB .. 10 MB, writes docs/
    OMP_NUM_THREADS=1 python scripts/benchmarks/build_scaling.py --sizes 10000 100000 --out /tmp/b.json --plot ''

For each size ``L`` (characters) it writes two small files in a temporary folder and builds each the way
``scripts/build_graph.py`` does (:func:`graphmem.builders.pipeline.reuse_or_build`: load, embed with the hashing
encoder, build, save with the BM25 index; ``force``, so every build is timed from scratch):

* ``locomo turn``: a LoCoMo conversation of three turns whose middle turn holds ``L`` characters of the
  first LoCoMo conversation's own dialogue, repeated;
* ``musique passage, sentence nodes``: the first MuSiQue record with its first paragraph replaced by ``L``
  characters of the file's paragraphs, repeated, built with ``graph.sentence_nodes=true`` (pySBD splits it).

Each row: wall and CPU seconds of the whole build, its load / embedding / graph parts, and the builders'
text passes alone on the long text (entity extraction; for the passage also sentence splitting, uncached).
A size above the default ``graph.max_text_chars`` is built with the limit raised to ``L`` and marked
``above_max``. Writes the JSON results (atomically) and a log-log plot
(:func:`graphmem.eval.plots.plot_build_scaling`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from graphmem.builders import DataConfig, GraphConfig, reuse_or_build
from graphmem.builders.entities import CueEntityExtractor
from graphmem.builders.sentences import split_sentences
from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.datasets import data_file, load_locomo, load_musique
from graphmem.eval.plots import plot_build_scaling
from graphmem.store.io import atomic_write

ROOT = Path(__file__).resolve().parents[2]
SIZES = (10_000, 100_000, 1_000_000, 10_000_000)


def repeated(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text`` repeated (joined by spaces)."""
    return ((text + " ") * (chars // (len(text) + 1) + 1))[:chars]


def sources() -> dict[str, str]:
    """Real text to repeat: the first LoCoMo conversation's turns, and every distinct MuSiQue paragraph."""
    convs, _, _ = load_locomo(data_file("locomo/locomo_dev8.json"))
    records, _, _ = load_musique(data_file("musique/musique_ans_50.json"))
    paragraphs = dict.fromkeys(p.text for r in records for p in r.paragraphs)
    return {"locomo": " ".join(t.text for t in convs[0].turns), "musique": " ".join(paragraphs)}


def locomo_file(folder: Path, turn: str) -> Path:
    """A LoCoMo file of one conversation whose second turn is ``turn``."""
    session = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob, how was the trip?"},
        {"speaker": "Bob", "dia_id": "D1:2", "text": turn},
        {"speaker": "Ann", "dia_id": "D1:3", "text": "Sounds great. See you soon."},
    ]
    conv = {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023"}
    qa = [{"question": "How was the trip?", "answer": "great", "evidence": ["D1:2"], "category": 4}]
    path = folder / "locomo_long_turn.json"
    path.write_text(json.dumps([{"sample_id": "long", "conversation": {**conv, "session_1": session}, "qa": qa}]))
    return path


def musique_file(folder: Path, passage: str) -> Path:
    """The first MuSiQue record with its first paragraph's text replaced by ``passage``."""
    record = json.loads(data_file("musique/musique_ans_50.json").read_text(encoding="utf-8"))[0]
    record["paragraphs"][0]["paragraph_text"] = passage
    path = folder / "musique_long_passage.json"
    path.write_text(json.dumps([record]))
    return path


def timed(fn) -> tuple[float, float, object]:
    """Wall seconds, CPU seconds and the result of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def build_row(kind: str, path: Path, text: str, folder: Path, sentence_nodes: bool) -> dict:
    """One timed build of ``path`` (dataset ``kind``) and the builders' text passes alone on ``text``."""
    default = GraphConfig().max_text_chars
    graph = GraphConfig(
        encoder="hashing",
        cache_dir=str(folder / "cache"),
        sentence_nodes=sentence_nodes,
        max_text_chars=max(default, len(text)),
    )
    data = DataConfig(name=kind, file=str(path))
    wall, cpu, (graphset, _) = timed(lambda: reuse_or_build(data, graph, folder / "set", progress=False, force=True))
    extract_s, _, entities = timed(lambda: CueEntityExtractor().extract([text]))
    split_s, _, sentences = timed(lambda: split_sentences.__wrapped__(text)) if sentence_nodes else (None, 0, ())
    stats = graphset.stats
    return {
        "chars": len(text),
        "above_max": len(text) > default,
        "build_s": round(wall, 3),
        "build_cpu_s": round(cpu, 3),
        "load_s": stats["load_s"],
        "embed_s": stats["embed_s"],
        "graph_s": stats["graph_s"],
        "save_s": round(wall - stats["load_s"] - stats["embed_s"] - stats["graph_s"], 3),
        "extract_s": round(extract_s, 3),
        "split_s": None if split_s is None else round(split_s, 3),
        "entities": len(entities[0]),
        "sentences": len(sentences) if sentence_nodes else None,
        "nodes": sum(g.num_nodes for g in graphset.graphs.values()),
    }


def measure(sizes: list[int], log=print) -> dict[str, list[dict]]:
    """Rows of both series (module docstring) at every size, each built in a fresh temporary folder."""
    text = sources()
    series: dict[str, list[dict]] = {"locomo turn": [], "musique passage, sentence nodes": []}
    for chars in sizes:
        for name, kind, source, nodes in (
            ("locomo turn", "locomo", "locomo", False),
            ("musique passage, sentence nodes", "musique", "musique", True),
        ):
            long = repeated(text[source], chars)
            with tempfile.TemporaryDirectory(prefix="build-scaling-") as tmp:
                folder = Path(tmp)
                path = locomo_file(folder, long) if kind == "locomo" else musique_file(folder, long)
                row = build_row(kind, path, long, folder, nodes)
            series[name].append(row)
            log(f"{name}: {chars:>10,} characters: build {row['build_s']:.2f} s ({json.dumps(row)})")
    return series


def growth(rows: list[dict]) -> list[dict]:
    """Time ratio against text ratio between consecutive sizes (about the text ratio when linear)."""
    return [
        {
            "from_chars": a["chars"],
            "to_chars": b["chars"],
            "text_ratio": round(b["chars"] / a["chars"], 2),
            "build_ratio": round(b["build_s"] / a["build_s"], 2),
        }
        for a, b in zip(rows, rows[1:])
    ]


def run(args: dict) -> dict:
    import torch

    if not args["sizes"] or any(n < 1 for n in args["sizes"]):
        raise ValueError(f"--sizes must be positive character counts, got {args['sizes']}")
    torch.set_num_threads(1)
    series = measure(sorted(args["sizes"]), log=lambda line: print(line, flush=True))
    report = {
        "command": " ".join(["python scripts/benchmarks/build_scaling.py", *sys.argv[1:]]),
        "environment": {
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "encoder": "hashing",
        "max_text_chars": GraphConfig().max_text_chars,
        "target": {"chars": 1_000_000, "seconds": 10.0},
        "series": series,
        "growth": {name: growth(rows) for name, rows in series.items()},
    }
    out = Path(args["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=2) + "\n"))
    print(f"wrote {out}")
    if args["plot"]:
        report["title"] = "graph-set build time against one long text (hashing encoder, 1 thread)"
        print(f"wrote {plot_build_scaling(report, args['plot'])}")
    return report


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="characters of the long text")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "build_scaling.json")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "build_scaling.png"), help="PNG path; '' for none")
    return parser


def work(args: argparse.Namespace) -> None:
    set_threads(None)  # $OMP_NUM_THREADS, else one thread (graphmem.config.cli.set_threads)
    run({"sizes": args.sizes, "out": str(args.out), "plot": args.plot})


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
