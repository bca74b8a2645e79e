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

from graphmem.docgen.sources import read_json

SWEEP_VARIANTS = ("beta_bfs+ann", "ppr+ann", "gnn+ann", "router+ann", "beta_bfs", "ppr", "gnn", "router")


def _section(results_dir: Path, name: str, table, *args) -> list[str]:
    """``table(data, *args)`` of ``results_dir / name``, or a line saying it was not measured."""
    path = Path(results_dir) / name
    if not path.is_file():
        return [f"({name} not present: not measured)"]
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
    return lines + ["", f"Made by `{data['command']}`."]


def _sweep(data: dict[str, Any]) -> list[str]:
    sizes = list(data["sizes"])
    lines = [
        "Wall p50 / p95 ms, CPU p50 ms in brackets, each query served alone (its fastest of the sweep's repeats);"
        " the last column is p50 at the largest size over 10³ (wall, CPU).",
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
        lines += ["", f"Load average (1 min) {start[0]:.1f} at the start, {end[0]:.1f} at the end, on 2 cores."]
    return lines + ["", f"Made by `{data['command']}`."]


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
    lines += ["", "Entry recall of the selector as served against the same selector forced exact (top-6 overlap;"]
    lines += ["† marks the sizes where the bounded path served):", ""] + recall + ["", "Per-size build costs:", ""]
    lines += builds
    start, end = data.get("load_average_at_start"), data.get("load_average_at_end")
    if start and end:
        lines += ["", f"Load average (1 min) {start[0]:.1f} at the start, {end[0]:.1f} at the end, on 2 cores;"]
        lines[-1] += f" {data.get('torch_threads')} torch thread(s), OMP_NUM_THREADS={data.get('omp_num_threads')}."
    return lines + ["", f"Made by `{data['command']}`."]


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
    return lines + ["", f"Made by `{data['command']}`."]


def render(results_dir: Path) -> str:
    """The whole page, from the ``bounded_*.json`` files in ``results_dir``."""
    lines = _ppr_part(results_dir) + _gnn_part(results_dir) + _scale_part(results_dir)
    lines += _lexical_section(results_dir)
    return "\n".join(lines) + "\n"


def _ppr_part(results_dir: Path) -> list[str]:
    """The title, what bounded means, and the ``ppr`` section: forward push against power iteration, per ``ε``."""
    lines = [
        "# Bounded retrieval for every policy: PPR by forward push, the GNN reader on what its layers read",
        "",
        "Bounded means the work of one query does not grow with the number of nodes `N`: no tensor of size",
        "`N` or `E` is allocated, masked or scanned per query. Both policies gather what they read from a CSR",
        "built once per graph (`graphmem/policies/subgraph.py`) and keep each query's state as the sorted",
        "`(query, node)` pairs it touched.",
        "",
        "## `ppr`: forward push (`method: push`, the default)",
        "",
        "Andersen, Chung and Lang's forward push (`graphmem/policies/push.py`), all nodes over the threshold",
        "pushed at once in a round, all queries of a batch in one set of keys. With restart distribution `s`",
        "(uniform over the entries), transition `P`, dangling mass returned to `s` (`M = Pᵀ + s 1_Dᵀ`),",
        "`G = α (I − (1 − α) M)⁻¹`: the pushed mass `p` and residual `r` keep `π = p + G r`; a push at `u`",
        "moves `α r_u` into `p_u` and spreads `(1 − α) r_u` along `M e_u`, and `u` is pushed while",
        "`r_u ≥ ε · max(outdeg u, 1)`.",
        "",
        "- **Cost**: each push reads `d_u` rows and moves at least `α ε d_u` into `p` (total ≤ 1), so one",
        "  query reads at most `1 / (α ε)` CSR rows, whatever `N`.",
        "- **Error**: `‖π − p‖₁ = ‖r‖₁ < ε Σ_{r_u > 0} d_u`; `forward_push` returns `‖r‖₁` per query. Since",
        "  `G ≥ α I`, the estimate the policy ranks by, `p̂ = p + α r`, is a tighter lower bound:",
        "  `0 ≤ π_v − p̂_v` and `‖π − p̂‖₁ = (1 − α) ‖r‖₁`, at no extra reads.",
        "- The global power iteration stays as `method: power`, the oracle. `tests/test_ppr_push.py` checks",
        "  the push against it within those bounds (four graphs, three `ε`, two `α`), and that the rows read",
        "  and the pairs touched stay under the bound on graphs of 10³–10⁵ nodes.",
        "- Candidates are the touched nodes (`p̂ > 0`) within `max_hops` (a bounded breadth-first ball), ranked",
        "  by `p̂` and loaded under the budget as before.",
        "",
        "Push (the default `ε`, `α = 0.15`) against power iteration, same entries and budget, evidence",
        "recall over the `overall` questions, paired per question:",
        "",
    ]
    lines += _section(results_dir, "bounded_ppr.json", _pairs_table, "power", "push")
    lines += [
        "",
        "At each `ε` on the densest set, pooled HotpotQA (about 31 out-edges per node): a smaller `ε` brings",
        "the push nearer the power iteration (more identical loaded lists) and costs more rounds. The default,",
        "`ε = 3·10⁻⁵`, is the largest `ε` of these runs whose recall is within 0.005 of the power iteration here",
        "(chosen on these development questions):",
        "",
    ]
    lines += _section(results_dir, "bounded_ppr_epsilon.json", _pairs_table, "power", "push")
    return lines


def _gnn_part(results_dir: Path) -> list[str]:
    """The ``gnn`` section: the reader on its layered parts against the full pass, and training on them."""
    lines = [
        "",
        "## `gnn`: the reader on what its layers read around the walk (`method: ball`, the default)",
        "",
        "The walk reads the scores of the entries and, before hop `d`, of the out-neighbours of its",
        "depth-`d − 1` frontier. Before each hop the reader runs once over one part per query",
        "(`layered_subgraphs`): for the nodes `T` whose scores the hop reads, layer `l` of `L` runs on the",
        "relational in-edges of `S_l` (each edge and its inverse; `S_L = T`, and `S_{l−1}` adds their",
        "sources), each mean over the node's full in-degree. Before layer 1 only the entries hold non-zero",
        "states and a message from a zero state is zero, so layer 1 reads just the entries' own edges into",
        "`S_1`. A node's state after `l` layers depends only on its in-neighbours' states after `l − 1`, so",
        "every node of `S_l` has its full-graph state after `l` layers, and the readout runs at `T` alone.",
        "Every score the walk reads is the full-graph score (up to float summation order), and the policy",
        "loads what `method: full` loads. `tests/test_gnn_ball.py` checks the scores with `torch.allclose`",
        "for 1–3 layers, with and without inverse edges, on a graph with self-loops and a repeated edge (and",
        "that the mean over the part's own edges instead of the full in-degree changes them), the loaded sets",
        "against the full pass, and that the edges read stay flat from 10⁴ to 10⁵ nodes. A batch of 8 or more",
        "queries whose targets' in-edges alone exceed 1/32 of one full pass's edge-columns (their neighbourhoods",
        "cover much of a small graph) shares full-graph passes instead: the same scores, at batched throughput",
        "(`parts_cost_more`, `BallScores`); a query served alone is always scored on its part.",
        "",
        "Ball against full pass, same checkpoint (trained on LoCoMo fold 0, 3 epochs), entries and budget:",
        "",
    ]
    lines += _section(results_dir, "bounded_gnn.json", _pairs_table, "full", "ball")
    lines += [
        "",
        "### Training on the same neighbourhoods",
        "",
        "`rl/gnn/train.py` (`train.neighbourhood: true`, the default) scores each question's candidates",
        "(the nodes within `max_hops` out-edge hops of its entries: every node the walk can score) from the",
        "same layered parts, one per question, and the losses compare the candidates only. Where the parts",
        "would read more than an eighth of the edge-columns of one full-graph pass over the batch (a part's",
        "edge costs about seven of those on a CPU thread), that pass gives the same scores cheaper and is",
        "used instead: on LoCoMo's small graphs the candidates within two hops cover most of a graph, so it",
        "is, and the default run is the global pass plus the candidates' bookkeeping (the ball of candidates",
        "and the loss over them). `neighbourhood: false` is the global version: every node scored and in the",
        "loss. LoCoMo, fold 0, 3 epochs, one thread:",
        "",
    ]
    lines += _section(results_dir, "bounded_gnn_train.json", _training)
    return lines


def _scale_part(results_dir: Path) -> list[str]:
    """The scale sweep: every variant's reads and throughput on synthetic graphs of growing size."""
    lines = ["", "## Scale sweep", ""]
    lines += _section(results_dir, "bounded_scaling.json", _sweep)
    lines += [
        "",
        "Synthetic graphs of average degree 8, entries from an IVF index. On the 10³-node graph the push at the",
        "default `ε` spreads over most of the graph and sweeps it for more rounds than on the larger ones,",
        "where the reads are bounded by `1 / (α ε)` and the degrees rather than by `N`; batched throughput",
        "per variant and size is in `docs/results/bounded_scaling.json`.",
    ]
    return lines


LEXICAL_METHOD = [
    "",
    "## `hybrid` and `bm25`: entries bounded per query",
    "",
    "On graphs of at least `min_nodes` nodes (default 16384, the `ann` selector's; `min_nodes: 0` forces it)",
    "the hybrid fusion (`graphmem/policies/hybrid.py`, also the router's shipped entry selector) ranks both",
    "halves without a pass over `N`. The dense half's top `candidates` come from the graph's FAISS index",
    "(HNSW by default, re-scored by exact cosine, ties by id: `graphmem/vector_index.py`), approximate only",
    "in what the index misses. The BM25 half's are exact: `BM25Index.rank_bounded` (`graphmem/lexical.py`)",
    "keeps every term's postings by weight descending and reads the query's terms rare first (largest",
    "`ub(t)`, the term's top weight, first), in chunks, adding weights into a partial score `p(d)`; after",
    "each chunk the `k` rows of largest `p` are scored exactly, and `θ` is the smallest of those scores (at",
    "most the true k-th). With `u_t` the next unread weight of term `t` (0 once read) and `U = Σ_t u_t`,",
    "every row scores at most `p(d) + U`, so the read stops once `U < θ`, and only the rows with",
    "`p(d) + U ≥ θ` are scored exactly and ranked by (score, string id). Any other row scores below `θ`:",
    "the result is the exact top-k, ties included (Fagin's threshold algorithm, with MaxScore's term",
    "order). The `bm25` policy reads its ranking that way as far as its loader goes (`max_nodes` first,",
    "doubling). Index mutations rebuild the impact order with the weights (they change with `N`).",
    "`tests/test_bounded_lexical.py` checks the bounded top-k against the full ranking on random Zipf",
    "corpora with repeated texts, the policies' loaded lists, the hybrid entries after nodes are added",
    "and removed, and that a common term's postings are read one chunk deep.",
    "",
    "Forced bounded (`min_nodes: 0`) against exact, same sets and budget, evidence recall paired per",
    "question: the `hybrid` policy, `bm25`, and the `router` with hybrid entries (one checkpoint for both",
    "sides: a short LoCoMo fold-0 run, 1 imitation and 1 policy-gradient epoch; the pairing, not its",
    "recall, is the point). Served times are single calls while other jobs ran; the text sweep below is",
    "the latency measurement:",
    "",
]
LEXICAL_PAIRS = ("hybrid", "bm25", "router")
TEXT_SWEEP_INTRO = [
    "",
    "### Text scale sweep",
    "",
    "Memories with note-like texts (`graphmem.synthetic.make_text_graph`: Zipf vocabulary of 30,000 words,",
    "topic words, names, dates and numbers, topic-clustered embeddings without an encoder), queries that",
    "quote four words of a random node; each variant as its `configs/policy` file ships it (`router`: hybrid",
    "entries, lexical features, a fresh scorer of the trained shape). Wall p50 / p95 ms, CPU p50 in",
    "brackets, each query served alone (fastest of 3 calls):",
    "",
]


def _lexical_section(results_dir: Path) -> list[str]:
    """The hybrid and BM25 entries bounded per query: the algorithm, paired recall on real sets, the text sweep."""
    pairs = [_section(results_dir, f"bounded_{p}.json", _pairs_table, "exact", "bounded") for p in LEXICAL_PAIRS]
    tables = [line for table in pairs for line in [*table, ""]][:-1]
    sweep = _section(results_dir, "scaling_text.json", _text_sweep)
    return LEXICAL_METHOD + tables + TEXT_SWEEP_INTRO + sweep + TEXT_SWEEP_NOTE


TEXT_SWEEP_NOTE = [
    "",
    "The router serves its walk (the scorer and the candidates' lexical features) on top of the same hybrid",
    "entries. The bounded `bm25` and `hybrid` do not read `N` rows but still grow with it here: an exact top-k",
    "must read every posting of each query term whose weight can still reach the k-th score, and on a Zipf",
    "vocabulary the postings of a given word grow with `N` (the p95 are the queries whose quoted words are",
    "all common); the hybrid adds the HNSW search of its dense half. `beta_bfs` as shipped ranks entries by",
    "exact cosine over all `N` embeddings.",
]
