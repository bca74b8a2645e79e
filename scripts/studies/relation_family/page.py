"""docs/relation_family.md: the walk's edge features and relation intent on memory where the relation of an
edge, not cosine, names the evidence; rendered from ``docs/results/relation_family.json`` and, when
present, ``relation_family_untyped.json`` (``scripts/studies/relation_family/run.py``)."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import check_spread, field, fill, load_results, p_value, results_at

from graphmem.eval.report import markdown_grid

RESULTS = "relation_family.json"
UNTYPED_RESULTS = "relation_family_untyped.json"
PAGE = "relation_family"
TEMPLATE = str(Path(__file__).with_name("page"))
"""the page's prose: ``page.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""
VARIANTS = (
    ("full", "—", "learned inductive edge features `e = e0 + f(a, Px ⊙ Px)`, intent head `π(q)`, "
     "modulation `m(q) = 4 π(q) + g([q ; π(q)])`"),
    ("no_intent", "`model.intent=uniform`", "`π = 1/4`; the modulation `g` still reads the query"),
    ("no_learned_edges", "`model.edge_mode=phase1`", "`e = e0`, the graph's own Phase-1 features, static"),
    ("neither", "both", "static `e0`, no intent head, `g`"),
    ("intent_head_only", "`model.modulation=false`", "`m(q) = 4 π(q)`: the query reaches the edges through `π` alone"),
    ("no_query_weighting", "`model.intent=uniform model.modulation=false`",
     "`m = 1`: nothing weighs the edges by the question"),
)  # fmt: skip
"""the variants of relation_family.yaml (beside this file): name, trainer overrides, what the scorer keeps"""


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _spread(s: dict) -> str:
    if s.get("std") is None:
        return _pct(s.get("mean"))
    return f"{s['mean']:.3f} ± {s['std']:.3f}"


def _recall_table(res: dict, path: Path) -> str:
    seeds = field(res, path, "seeds")
    per_seed, summary, questions = (field(res, path, k) for k in ("per_seed", "summary", "questions"))
    header = ["policy", *(f"family {s}" for s in seeds), "mean ± std", "test questions"]
    for name, values in per_seed.items():  # the families shown and the mean ± std beside them agree
        check_spread(path, f"summary.{name}", values, field(res, path, "summary", name))
    rows = [
        [f"**{name}**" if name in res["variants"] else name, *(_pct(v) for v in values), _spread(summary[name])]
        + [f"{questions[name]:,}"]
        for name, values in per_seed.items()
    ]
    return markdown_grid(header, rows)


def _paired_table(res: dict, path: Path) -> str:
    rows = [
        [
            f"{c['policy']} − {c['reference']}",
            f"{c['mean']:.3f}",
            f"{c['reference_mean']:.3f}",
            f"{c['mean_diff']:+.3f}",
            f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]",
            p_value(c["p_value"]),
            f"{c['n']:,}",
        ]
        for c in field(res, path, "paired")
    ]
    return markdown_grid(["paired difference", "first", "second", "Δ recall", "95% CI", "p", "n"], rows)


def _kind_table(res: dict, path: Path) -> str:
    counts = field(res, path, "kind_questions")
    kinds = list(counts)
    rows = [[name, *(_pct(by.get(k)) for k in kinds)] for name, by in field(res, path, "by_kind").items()]
    return markdown_grid(["policy", *(f"{k} ({counts[k]})" for k in kinds)], rows)


def _cosine_lines(res: dict, path: Path) -> list[str]:
    lines = []
    for c in field(res, path, "neighbour_cosine"):
        lines.append(
            f"- family {c['seed']}: gold neighbour {c['gold_mean']:.3f} ± {c['gold_std']:.3f} "
            f"(n = {c['gold_n']}), the anchor's other neighbours {c['other_mean']:.3f} ± {c['other_std']:.3f} "
            f"(n = {c['other_n']})"
        )
    return lines


def _readout_lines(res: dict, path: Path) -> list[str]:
    return [
        f"- family {r['seed']}: the nearest intent direction is the question's kind for {r['kind_accuracy']:.3f} "
        f"of the {r['n']} test questions, its relation for {r['relation_accuracy']:.3f}"
        for r in field(res, path, "intent_readout")
    ]


def _diff(c: dict) -> str:
    return f"{c['mean_diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def _summary(res: dict, path: Path, untyped: bool = False) -> list[str]:
    """What the measured differences say, sentence by sentence, each only where its comparison was run."""
    by = {c["reference"]: c for c in field(res, path, "paired")}
    ref = res["reference"]
    out = []
    if "no_query_weighting" in by:
        c = by["no_query_weighting"]
        blind = (
            f" (the untrained cosine walk: {by['cosine_walk']['reference_mean']:.3f})" if "cosine_walk" in by else ""
        )
        out.append(
            f"**The question must weigh the edges.** With no way from the question to the edge features "
            f"(`no_query_weighting`) the walk can learn one fixed preference over relations and recalls "
            f"{c['reference_mean']:.3f}{blind}; `{ref}` recalls {c['mean']:.3f} (Δ = {_diff(c)})."
        )
    if "no_intent" in by:
        c, head, blind = by["no_intent"], by.get("intent_head_only"), by.get("no_query_weighting")
        text = (
            f"**The intent head is one of two carriers of that weighting.** Without it (`no_intent`) the "
            f"modulation `g` learns the weighting from the query embedding: Δ = {_diff(c)}, {_verdict(c)}."
        )
        if head is not None:
            kinds = res["by_kind"]["intent_head_only"]
            worst = sorted(kinds, key=kinds.get)[:2]
            text += (
                f" Without `g` the intent head alone (`intent_head_only`: four relation weights, no direction) "
                f"recalls {head['reference_mean']:.3f} (Δ = {_diff(head)}); its weakest kinds are "
                + " and ".join(f"`{k}` ({kinds[k]:.3f})" for k in worst)
                + "."
            )
            if blind is not None and c["mean"] > blind["reference_mean"]:
                share = (head["reference_mean"] - blind["reference_mean"]) / (c["mean"] - blind["reference_mean"])
                text += f" It recovers {share:.0%} of the gain of `{ref}` over `no_query_weighting`."
        out.append(text)
    if "no_learned_edges" in by:
        c = by["no_learned_edges"]
        tie = c["ci_low"] <= 0 <= c["ci_high"]
        head = "are not what this memory needs" if tie else "change recall here"
        out.append(
            f"**Learned edge features {head}.** Static Phase-1 features (`no_learned_edges`): Δ = {_diff(c)}, "
            f"{_verdict(c)}. Relation and direction are written on the edges here, and the raw pair features "
            f"reach the head `h` in every edge mode; beyond what `h` sees, the learned `f(a, Px ⊙ Px)` adds only "
            f"what the endpoints' contents say about a link: "
            + ("a memory of untyped links, the next section." if untyped else "nothing, in this family.")
        )
    readout = field(res, path, "intent_readout")
    if readout:
        legible = sum(r["kind_accuracy"] for r in readout) / len(readout)
        kinds = res["by_kind"][ref]
        out.append(
            f"**What is left is reading the intent.** The nearest of the generator's own intent directions "
            f"(which no policy sees) names the question's kind for {legible:.3f} of the test questions (mean over "
            f"the families); `{ref}`, which learns to read the intent from the training questions, recalls "
            f"{res['summary'][ref]['mean']:.3f}, between {min(kinds.values()):.3f} and {max(kinds.values()):.3f} "
            "per kind."
        )
    return out


def _verdict(c: dict) -> str:
    if c["ci_low"] > 0:
        return "higher (the CI lies above 0)"
    if c["ci_high"] < 0:
        return "lower (the CI lies below 0)"
    return "no difference resolved (the CI holds 0)"


def _findings(res: dict, path: Path) -> list[str]:
    """One line per comparison of the reference with another variant, worded from its CI."""
    variants = list(field(res, path, "variants"))
    out = []
    for c in field(res, path, "paired"):
        if c["reference"] in variants:
            out.append(
                f"- `{c['policy']}` against `{c['reference']}`: Δ = {c['mean_diff']:+.3f} "
                f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], n = {c['n']:,}: {_verdict(c)}."
            )
    return out


def _measured(res: dict, path: Path, level: str = "##") -> list[str]:
    """The run's command and setting, the cosine check, and the recall, paired and per-kind tables."""
    fam, budget = field(res, path, "family"), field(res, path, "budget")
    splits = field(res, path, "splits")
    s0 = splits[0]
    return [
        "```bash",
        field(res, path, "command"),
        "```",
        "",
        f"{len(splits)} families (seeds {', '.join(str(s['seed']) for s in splits)}), each of "
        f"{fam['num_graphs']} conversations of {fam['events']} events, {fam['questions_per_graph']} questions "
        f"per conversation, embeddings of dimension {fam['dim']} (intent weight {fam['intent_strength']}); "
        f"split by conversation into {s0['train']} train / {s0['val']} validation / {s0['test']} test "
        f"conversations ({s0['train_questions']} / {s0['val_questions']} / {s0['test_questions']} questions "
        f"in family {s0['seed']}). Budget: {budget['max_entries']} entry, top-{budget['top_k_neighbors']} "
        f"neighbour, {budget['max_hops']} hop, {budget['max_nodes']} nodes. "
        f"{field(res, path, 'wall_s'):.0f} s on one CPU thread.",
        "",
        "Cosine of the question to the anchor's neighbours, on the test conversations (mean ± std):",
        "",
        *_cosine_lines(res, path),
        "",
        f"{level} Evidence recall on the test conversations",
        "",
        "Per family, and mean ± std over the families (ddof = 1):",
        "",
        _recall_table(res, path),
        "",
        f"Paired per question over every family's test questions, `{res['reference']}` minus each other "
        "policy (10,000-resample percentile bootstrap CI; p of the paired t-test):",
        "",
        _paired_table(res, path),
        "",
        f"{level} By question kind",
        "",
        "Evidence recall per question kind over every family's test questions (questions per kind in brackets):",
        "",
        _kind_table(res, path),
        "",
    ]


def _content_only(res: dict, path: Path) -> list[str]:
    """Recall on the kinds whose relation only the nodes' contents tell (all but temporal), per variant."""
    by_kind, counts = field(res, path, "by_kind"), field(res, path, "kind_questions")
    kinds = [k for k in counts if k not in ("next", "previous")]
    if not kinds:
        return []

    def recall(name: str) -> float:
        return sum(by_kind[name][k] * counts[k] for k in kinds) / sum(counts[k] for k in kinds)

    cells = ", ".join(f"`{v}` {recall(v):.3f}" for v in res["variants"] if v in by_kind)
    return [
        "",
        f"On the questions whose relation only the nodes' contents tell ({', '.join(kinds)}; telling the temporal "
        f"neighbours apart but not the other three scores 1/3): {cells}.",
    ]


def render(results_dir: Path) -> str:
    path, res = results_at(results_dir, RESULTS)
    variants = "\n".join(
        ["| variant | overrides | what the scorer keeps |", "|---|---|---|"]
        + [f"| `{n}` | {o} | {k} |" for n, o, k in VARIANTS]
    )
    out = [fill(TEMPLATE, "intro", variants=variants), ""]
    if res is None:
        return (
            "\n".join([*out, f"Not measured yet: `python scripts/studies/relation_family/run.py out={path}`."]) + "\n"
        )
    out += [
        "## The run",
        "",
        *_measured(res, path),
        "## Reading",
        "",
        *_findings(res, path),
        "",
        fill(TEMPLATE, "reading"),
        "",
        "How legible the intent is in the query embeddings of the test questions:",
        "",
        *_readout_lines(res, path),
        "",
    ]
    untyped_path = Path(results_dir) / UNTYPED_RESULTS
    untyped = load_results(results_dir, UNTYPED_RESULTS)
    out += [line for text in _summary(res, path, untyped is not None) for line in (text, "")]
    if untyped is not None:
        link = field(untyped, untyped_path, "family", "link_strength")
        out += [fill(TEMPLATE, "untyped", link=link), "", *_measured(untyped, untyped_path, "###")]
        out += _findings(untyped, untyped_path) + _content_only(untyped, untyped_path)
    return "\n".join(out).rstrip() + "\n"
