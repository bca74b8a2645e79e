"""docs/lexical.md: the BM25 index, the bm25 and hybrid baselines and walks from hybrid entries, as measured.

Renders ``docs/results/lexical_library_bench.json`` (``scripts/benchmarks/bench_lexical.py``),
``lexical_baselines_selection.json``, ``lexical_baselines.json`` and ``lexical_baselines_walks.json``
(``scripts/studies/lexical_baselines/run.py``); a missing file is named on the page instead of its section.
"""

from __future__ import annotations

from pathlib import Path

from docgen.sources import fill, read_json
from graphmem.index.lexical import STOP_WORDS, TOKENIZER_NAME

METRICS = {"evidence_recall": "evidence recall", "all_evidence_hit": "all-evidence hit"}
SETS = {
    "locomo": "LoCoMo (8 conversations)",
    "hotpotqa": "HotpotQA dev (per question)",
    "musique": "MuSiQue (per question)",
    "musique-pooled": "MuSiQue pooled",
    "hotpotqa-pooled": "HotpotQA pooled",
}

PAGE = "lexical"


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _diff(c: dict | None) -> str:
    if not c:
        return "—"
    return f"{c['mean_diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def _load(results_dir: Path, name: str) -> dict | None:
    path = Path(results_dir) / name
    return read_json(path) if path.is_file() else None


def _library(bench: dict | None) -> list[str]:
    lines = [fill(PAGE, "library"), ""]
    if bench is None:
        return lines + [fill(PAGE, "library_missing")]
    names = list(bench["hand_check"])
    missing = bench.get("not_installed")
    not_installed = f" (not installed: {', '.join(missing)})" if missing else ""
    lines += [
        fill(PAGE, "library_lead", command=bench["command"], not_installed=not_installed),
        "",
        "| library | k1 | scores | hand | largest relative error | score / hand |",
        "|---|---:|---|---|---:|---|",
    ]
    for n in names:
        h = bench["hand_check"][n]
        ratio = ", ".join(f"{r:.3f}" for r in h["score_over_hand"])
        lines.append(f"| {n} | {h['k1']} | {h['scores']} | {h['hand']} | {h['max_rel_err']:.2g} | {ratio} |")
    lines += [
        "",
        "| corpus | texts | library | build s | query p50 / p95 ms | top-12 agreement | 50 given rows ms "
        "| add 10 ms | remove 10 ms | bytes | round trip |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for corpus, row in bench["corpora"].items():
        for n in names:
            m = row[n]
            given = "no such call" if m["given_rows_ms"] is None else f"{m['given_rows_ms']:.3f}"
            lines.append(
                f"| {corpus} | {row['texts']:,} | {n} | {m['build_s']:.3f} | {m['query_p50_ms']:.3f} / "
                f"{m['query_p95_ms']:.3f} | {m.get('agree_at_k', 1.0):.3f} | {given} | {m['add_ms']:.1f} | "
                f"{m['remove_ms']:.1f} | {m['bytes']:,} | {'same results' if m['roundtrip'] else 'DIFFERS'} |"
            )
    lines += [
        "",
        fill(PAGE, "library_verdict"),
    ]
    return lines


def _selection(sel: dict | None) -> list[str]:
    lines = ["", fill(PAGE, "selection"), ""]
    if sel is None:
        return lines + [fill(PAGE, "selection_missing")]
    sets = list(sel["sets"])
    reused = " (existing runs of the same evaluate commands kept)" if sel.get("reused") else ""
    lines += [
        fill(PAGE, "selection_lead", command=sel["command"], reused=reused),
        "",
        "| candidates | " + " | ".join(f"{s} evidence recall" for s in sets) + " | mean |",
        "|---:|" + "---:|" * (len(sets) + 1),
    ]
    for depth, mean in sel["mean_evidence_recall"].items():
        cells = [_fmt(sel["sets"][s][depth]["means"]["evidence_recall"]) for s in sets]
        mark = " (chosen)" if int(depth) == sel["chosen"] else ""
        lines.append(f"| {depth}{mark} | " + " | ".join(cells) + f" | {_fmt(mean)} |")
    lines += ["", fill(PAGE, "selection_default", chosen=sel["chosen"])]
    return lines


def _flat(flat: dict | None) -> list[str]:
    lines = ["", fill(PAGE, "flat"), ""]
    if flat is None:
        return lines + [fill(PAGE, "flat_missing")]
    lines += [fill(PAGE, "flat_lead", command=flat["command"])]
    for metric, label in METRICS.items():
        lines += [
            "",
            f"### {label.capitalize()}",
            "",
            "| set | n | dense | bm25 | hybrid | hybrid − dense [95% CI] | hybrid − bm25 [95% CI] "
            "| bm25 − dense [95% CI] |",
            "|---|---:|---:|---:|---:|---|---|---|",
        ]
        for name, row in flat["sets"].items():
            m, p = row["means"], row["paired"]
            pair = p["hybrid - dense_topk"].get(metric)
            cells = [_fmt(m[policy].get(metric)) for policy in ("dense_topk", "bm25", "hybrid")]
            cells += [_diff(p[pair_name].get(metric)) for pair_name in ("hybrid - dense_topk", "hybrid - bm25")]
            cells.append(_diff(p["bm25 - dense_topk"].get(metric)))
            n = pair["n"] if pair else m["hybrid"]["n"]
            lines.append(f"| {SETS.get(name, name)} | {n} | " + " | ".join(cells) + " |")
    return lines


def _walks(walks: dict | None) -> list[str]:
    lines = ["", fill(PAGE, "walks"), ""]
    if walks is None:
        return lines + [fill(PAGE, "walks_missing")]
    lines += [
        fill(PAGE, "walks_lead", set=SETS.get(walks["set"], walks["set"]), command=walks["command"]),
        "",
        "| walk | metric | n | embedding entries | hybrid entries | hybrid − embedding [95% CI] | p |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for walk, row in walks["walks"].items():
        for metric, label in METRICS.items():
            c = row["paired"]["hybrid entries - embedding entries"].get(metric)
            if c:
                lines.append(
                    f"| {walk} | {label} | {c['n']} | {_fmt(c['reference_mean'])} | {_fmt(c['mean'])} | "
                    f"{_diff(c)} | {c['p_value']:.2g} |"
                )
    return lines


def render(results_dir: Path) -> str:
    """The whole page, from the lexical results files in ``results_dir``."""
    intro = fill(PAGE, "intro", tokenizer=TOKENIZER_NAME, stops=len(STOP_WORDS))
    lines = [intro, "", fill(PAGE, "fusion"), ""]
    lines += _library(_load(results_dir, "lexical_library_bench.json"))
    lines += _selection(_load(results_dir, "lexical_baselines_selection.json"))
    lines += _flat(_load(results_dir, "lexical_baselines.json"))
    lines += _walks(_load(results_dir, "lexical_baselines_walks.json"))
    return "\n".join(lines) + "\n"
