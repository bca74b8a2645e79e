"""docs/bounded.md: ``ppr`` by forward push and ``gnn`` on what its layers read, bounded per query, as measured.

Reads from ``docs/results/``:

* ``bounded_scaling.json``: the scale sweep's report (``scripts/benchmark.py +suite=scaling``) with its ``command``;
* ``bounded_ppr.json`` / ``bounded_ppr_epsilon.json`` / ``bounded_gnn.json``: ``scripts/results.py compare``
  output (pairs of evaluation runs: power vs push, push at each ``epsilon``, full vs ball);
* ``bounded_gnn_train.json``: the reader's training runs on LoCoMo, global and on neighbourhoods, with per-epoch times;
* ``bounded_hybrid.json`` / ``bounded_bm25.json``: ``scripts/results.py compare`` output (exact against bounded
  entries, ``min_nodes`` 16384 against 0);
* ``scaling_text.json``: the text scale sweep's report (``scripts/benchmark.py +suite=scaling_text``).

A missing file is said so on the page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docgen.sources import fill, read_json

PAGE = "bounded"

SWEEP_VARIANTS = ("beta_bfs+ann", "ppr+ann", "gnn+ann", "router+ann", "beta_bfs", "ppr", "gnn", "router")


def _section(results_dir: Path, name: str, table, *args) -> list[str]:
    """``table(data, *args)`` of ``results_dir / name``, or a line saying it was not measured."""
    path = Path(results_dir) / name
    if not path.is_file():
        return [fill(PAGE, "not_measured", name=name)]
    return table(read_json(path), *args)


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def _pairs_table(data: dict[str, Any], first: str, second: str) -> list[str]:
    lines = [
        f"| set | n | recall {first} | recall {second} | Δ ({second} − {first}) [95% CI] | p | identical loaded lists"
        f" | served p50 ms {first} → {second} | p95 ms {first} → {second} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, pair in data["pairs"].items():
        c, a, b = pair["paired"], pair["first"], pair["second"]
        lines.append(
            f"| {name} | {c['n']:,} | {c['first']:.4f} | {c['second']:.4f} | {c['diff']:+.4f} [{c['ci'][0]:+.4f},"
            f" {c['ci'][1]:+.4f}] | {c['p']:.3f} | {pair['identical_loaded_share']:.1%}"
            f" | {_ms(a['served_p50_ms'])} → {_ms(b['served_p50_ms'])}"
            f" | {_ms(a['served_p95_ms'])} → {_ms(b['served_p95_ms'])} |"
        )
    return lines + ["", fill(PAGE, "made_by", command=data["command"])]


def _sweep(data: dict[str, Any]) -> list[str]:
    sizes = list(data["sizes"])
    lines = [
        fill(PAGE, "sweep_lead"),
        "",
        "| variant | " + " | ".join(f"{int(s):,}" for s in sizes) + " | largest / 10³ (wall, CPU) |",
        "|---|" + "---:|" * (len(sizes) + 1),
    ]
    for name in SWEEP_VARIANTS:
        cells = []
        for s in sizes:
            res = data["sizes"][s]["policies"].get(name)
            if res is None or "end_to_end_p50_ms" not in res:
                cells.append("not run")
                continue
            wall = f"{_ms(res['end_to_end_p50_ms'])} / {_ms(res['end_to_end_p95_ms'])}"
            cells.append(f"{wall} ({_ms(res['end_to_end_cpu_p50_ms'])})")
        if all(c == "not run" for c in cells):
            continue
        g = data.get("growth", {}).get(name, {})
        ratio = (
            f"{g['p50_largest_over_smallest']:.2f}×, {g['cpu_p50_largest_over_smallest']:.2f}×"
            if "p50_largest_over_smallest" in g
            else "—"
        )
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {ratio} |")
    start, end = data.get("load_average_at_start"), data.get("load_average_at_end")
    if start and end:
        lines += ["", fill(PAGE, "load", start=f"{start[0]:.1f}", end=f"{end[0]:.1f}")]
    return lines + ["", fill(PAGE, "made_by", command=data["command"])]


TEXT_VARIANTS = ("router", "hybrid", "bm25", "beta_bfs")


def _text_sweep(data: dict[str, Any]) -> list[str]:
    """Wall p50 / p95 (CPU p50) per variant and size, entry recall against exact, and the tables' build costs."""
    sizes = list(data["sizes"])
    head = "| variant | " + " | ".join(f"{int(s):,}" for s in sizes) + " | largest / 10³ (wall, CPU) |"
    lines = [head, "|---|" + "---:|" * (len(sizes) + 1)]
    recall = ["| variant | " + " | ".join(f"{int(s):,}" for s in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for name in TEXT_VARIANTS:
        runs = [data["sizes"][s]["policies"].get(name) or {} for s in sizes]
        if not any("end_to_end_p50_ms" in r for r in runs):
            continue
        cells = [
            f"{_ms(r['end_to_end_p50_ms'])} / {_ms(r['end_to_end_p95_ms'])} ({_ms(r['end_to_end_cpu_p50_ms'])})"
            if "end_to_end_p50_ms" in r
            else "not run"
            for r in runs
        ]
        g = data.get("growth", {}).get(name, {})
        ratio = f"{g['p50_largest_over_smallest']:.2f}×, {g['cpu_p50_largest_over_smallest']:.2f}×" if g else "—"
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {ratio} |")
        if any(r.get("entry_recall_at_k") is not None for r in runs):
            marks = [_recall(r) for r in runs]
            recall.append(f"| `{name}` | " + " | ".join(marks) + " |")
    builds = [
        "| size | graph s | BM25 index s | vector index s | lexical tables s | resident MB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sizes:
        e = data["sizes"][s]
        index = sum(v["build_s"] for v in e.get("index", {}).values())
        builds.append(
            f"| {int(s):,} | {e['graph_build_s']:.1f} | {e['bm25_build_s']:.1f} | {index:.1f} |"
            f" {e['lexical_tables_s']:.1f} | {e['rss_mb']:,.0f} |"
        )
    lines += ["", fill(PAGE, "text_recall_lead"), "", *recall, "", fill(PAGE, "builds_lead"), "", *builds]
    start, end = data.get("load_average_at_start"), data.get("load_average_at_end")
    if start and end:
        threads = {"torch": data.get("torch_threads"), "omp": data.get("omp_num_threads")}
        lines += ["", fill(PAGE, "load_threads", start=f"{start[0]:.1f}", end=f"{end[0]:.1f}", **threads)]
    return lines + ["", fill(PAGE, "made_by", command=data["command"])]


def _recall(run: dict[str, Any]) -> str:
    value = run.get("entry_recall_at_k")
    if value is None:
        return "—"
    return f"{value:.4f}" + (" †" if run.get("bounded") else "")


def _training(data: dict[str, Any]) -> list[str]:
    lines = [
        "| run | code | epochs | seconds (train + validation) | per epoch | train-only seconds per epoch"
        " | best val recall | test recall |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in data["runs"]:
        epochs = len(run["history"])
        train_only = [row["train_s"] for row in run["history"] if "train_s" in row]
        per = f"{sum(train_only) / len(train_only):.1f}" if train_only else "not recorded"
        lines.append(
            f"| {run['name']} | {run['code']} | {epochs} | {run['train_seconds']:.1f} |"
            f" {run['train_seconds'] / max(epochs, 1):.1f} | {per} | {run['val_recall']:.4f}"
            f" | {run['test_recall']:.4f} |"
        )
    return lines + ["", fill(PAGE, "made_by", command=data["command"])]


def render(results_dir: Path) -> str:
    """The whole page, from the ``bounded_*.json`` files in ``results_dir``."""
    lines = _ppr_part(results_dir) + _gnn_part(results_dir) + _scale_part(results_dir)
    lines += _lexical_section(results_dir)
    return "\n".join(lines) + "\n"


def _ppr_part(results_dir: Path) -> list[str]:
    """The title, what bounded means, and the ``ppr`` section: forward push against power iteration, per ``ε``."""
    lines = [fill(PAGE, "ppr"), ""]
    lines += _section(results_dir, "bounded_ppr.json", _pairs_table, "power", "push")
    lines += ["", fill(PAGE, "ppr_epsilon"), ""]
    lines += _section(results_dir, "bounded_ppr_epsilon.json", _pairs_table, "power", "push")
    return lines


def _gnn_part(results_dir: Path) -> list[str]:
    """The ``gnn`` section: the reader on its layered parts against the full pass, and training on them."""
    lines = ["", fill(PAGE, "gnn"), ""]
    lines += _section(results_dir, "bounded_gnn.json", _pairs_table, "full", "ball")
    lines += ["", fill(PAGE, "gnn_training"), ""]
    lines += _section(results_dir, "bounded_gnn_train.json", _training)
    return lines


def _scale_part(results_dir: Path) -> list[str]:
    """The scale sweep: every variant's reads and throughput on synthetic graphs of growing size."""
    lines = ["", fill(PAGE, "scale"), ""]
    lines += _section(results_dir, "bounded_scaling.json", _sweep)
    lines += ["", fill(PAGE, "scale_note")]
    return lines


LEXICAL_PAIRS = ("hybrid", "bm25", "router")


def _lexical_section(results_dir: Path) -> list[str]:
    """The hybrid and BM25 entries bounded per query: the algorithm, paired recall on real sets, the text sweep."""
    pairs = [_section(results_dir, f"bounded_{p}.json", _pairs_table, "exact", "bounded") for p in LEXICAL_PAIRS]
    tables = [line for table in pairs for line in [*table, ""]][:-1]
    sweep = _section(results_dir, "scaling_text.json", _text_sweep)
    lines = ["", fill(PAGE, "lexical"), "", *tables, "", fill(PAGE, "text_sweep"), "", *sweep]
    return lines + ["", fill(PAGE, "text_sweep_note")]
