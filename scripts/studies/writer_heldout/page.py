"""docs/writer_heldout.md: the SFT and GRPO writers measured on held-out graphs, rendered from one results file
per set (``scripts/studies/writer_heldout/run.py``): ``docs/results/writer_heldout.json`` (LoCoMo) and
``docs/results/writer_heldout_2wiki.json`` (2WikiMultiHopQA, ``experiment=writer_heldout_2wiki``), each preceded
by its validation check of entity linking (``link_check.py``: ``docs/results/writer_link_check_<set>.json``)."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import field, fill, load_results, p_value

from graphmem.eval.report import markdown_grid

SETS = (
    ("writer_heldout.json", "LoCoMo conversations", " experiment=writer_heldout_locomo", "locomo"),
    ("writer_heldout_2wiki.json", "2WikiMultiHopQA passages", " experiment=writer_heldout_2wiki", "2wiki"),
    (
        "writer_heldout_2wiki_fold1.json",
        "2WikiMultiHopQA passages, fold 1",
        " experiment=writer_heldout_2wiki split.fold=1 self_evolution=false"
        " results=docs/results/writer_heldout_2wiki_fold1.json",
        None,
    ),
    (
        "writer_heldout_2wiki_select.json",
        "2WikiMultiHopQA passages, the reward chosen on validation",
        " experiment=writer_heldout_2wiki 'reward_candidates=[{},{beta:0.0}]' self_evolution=false"
        " results=docs/results/writer_heldout_2wiki_select.json",
        None,
    ),
    (
        "writer_heldout_2wiki_lr.json",
        "2WikiMultiHopQA passages, the GRPO learning rate chosen on validation",
        " experiment=writer_heldout_2wiki 'reward_candidates=[{},{learning_rate:5.0e-4}]'"
        " results=docs/results/writer_heldout_2wiki_lr.json",
        None,
    ),
    (
        "writer_heldout_2wiki_whole.json",
        "2WikiMultiHopQA passages, the reward read on the whole graph",
        " experiment=writer_heldout_2wiki_whole",
        None,
    ),
    (
        "writer_heldout_2wiki_grounded.json",
        "2WikiMultiHopQA passages, the reward read on the whole graph, entities grounded",
        " experiment=writer_heldout_2wiki_grounded",
        None,
    ),
    (
        "writer_heldout_2wiki_shown.json",
        "2WikiMultiHopQA passages, the reward read on the whole graph, grounded, warm start on shown entities",
        " experiment=writer_heldout_2wiki_shown",
        "2wiki_shown",
    ),
    (
        "writer_heldout_2wiki_shown_fold2.json",
        "2WikiMultiHopQA passages, warm start on shown entities, fold 2",
        " experiment=writer_heldout_2wiki_shown split.fold=2 self_evolution=false"
        " results=docs/results/writer_heldout_2wiki_shown_fold2.json",
        None,
    ),
)
"""(results file, heading, the command's overrides, the set whose validation check of linking precedes it) of
each measured set and fold"""
LINK_ARMS = (
    ("builder", "the builder's graphs"),
    ("none", "no entity edges"),
    ("silver", "silver triples, not linked"),
    ("silver_linked", "silver triples, linked by mention"),
    ("silver_grounded", "silver triples, linked, only the entities their fragments name"),
)
PAGE = "writer_heldout"
TEMPLATE = str(Path(__file__).with_name("page"))
"""the page's prose: ``page.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""
COMMAND = "python scripts/studies/writer_heldout/run.py"
EVOLVED = (
    ("evolved_minus_frozen", "recalibrated − frozen reader, both on GRPO graphs"),
    ("evolved_grpo_minus_frozen_builder", "recalibrated reader on GRPO graphs − frozen reader on the builder's"),
)
ARMS = (
    ("builder", "(a) the builder's graphs"),
    ("sft", "(b) SFT writer"),
    ("grpo", "(c) GRPO writer"),
    ("none", "no entity edges (the floor)"),
)
READS = {
    "window": "the window's own graph (`reward_graph: window`)",
    "whole": "the window's whole graph (`reward_graph: whole`)",
}
"""what the reward's reader reads, by ``writer.reward_graph`` (results from before the setting: ``window``)"""
RECALL_TARGET = 0.03
"""GRPO-written test graphs must beat SFT-written ones by this much in reader recall (CI above 0)"""
REWARD_TARGET = 0.05
"""held-out task reward after GRPO must exceed the SFT writer's by this much"""


def _recall_table(recall: dict) -> str:
    """Reader recall per arm, in :data:`ARMS` order (a results file from before the ``none`` arm lacks it)."""
    return markdown_grid(
        ["test graphs", "evidence recall"], [[label, f"{recall[a]:.4f}"] for a, label in ARMS if a in recall]
    )


def _diff_row(label: str, c: dict | None) -> list[str]:
    if c is None:
        return [label, "–", "–", "–", "–", "–", "0"]
    return [
        label,
        f"{c['mean']:.4f}",
        f"{c['reference_mean']:.4f}",
        f"{c['mean_diff']:+.4f}",
        f"[{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]",
        p_value(c["p_value"]),
        f"{c['n']:,}",
    ]


def _setting(res: dict, path: Path) -> list[str]:
    w, s, b = field(res, path, "writer"), field(res, path, "sft"), field(res, path, "budget")
    split, params = field(res, path, "split"), field(res, path, "warm_start", "parameters")
    rw = w["reader_budget"]
    return [
        f"- split (fold {res.get('fold', 0)}): train {', '.join(split['train'])}; validation "
        f"{', '.join(split['val'])}; test {', '.join(split['test'])} ({res['questions']['test']} test questions, "
        f"{res['questions']['test_tasks']} test windows with gold evidence)",
        f"- writer `{w['model']}`: {params['trainable']:,} of {params['total']:,} parameters trained (the last "
        f"{w['trainable_layers']} blocks and the final norm); windows of {w['fragments_per_task']} fragments cut "
        f"to {w['max_fragment_chars']} characters, {w['max_completion_length']} new tokens; written entities "
        + ("linked by mention" if w.get("link_mentions") else "not linked by mention")
        + (", kept only on the fragments that name them" if w.get("grounded") else ""),
        f"- warm start: {s['max_steps']} SFT steps of {s['batch_size']} (learning rate {s['learning_rate']:g}, "
        f"at most {s['max_lines']} silver lines per window, their entities taken from "
        + ("the text the prompt shows)" if s.get("shown_only") else "the whole text, lower-cased)"),
        f"- GRPO: {w['max_steps']} steps of {w['batch_size']} completions = {w['batch_size'] // w['num_generations']}"
        f" groups of {w['num_generations']}, learning rate {w['learning_rate']:g}, temperature {w['temperature']}, "
        f"λ_rep {w['lambda_rep']}, λ_fmt {w['lambda_fmt']}, α {w['alpha']:g}, β {w['beta']:g}; the reward's reader "
        f"reads {READS[w.get('reward_graph', 'window')]} under {_count(rw['max_entries'], 'entry', 'entries')}, "
        f"{_count(rw['max_nodes'], 'node', 'nodes')}",
        f"- reader evaluation budget: {b['max_entries']} entries, top-{b['top_k_neighbors']} neighbours, "
        f"{b['max_hops']} hops, {b['max_nodes']} nodes",
        f"- {field(res, path, 'wall_s') / 60:.1f} min on {res['threads']} CPU thread(s); " + _memory(res),
    ]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _candidate_caution(res: dict) -> list[str]:
    """A caution for a run with reward candidates trained from deep copies of the SFT writer (before
    ``trainable_copy``): a deep copy of a writer a trainer has run on computes with the original's weights."""
    if not res.get("selection") or res.get("candidate_copies") == "trainable_copy":
        return []
    decoded = (
        "Their rewrites were decoded by fresh copies of their own weights (`rewrite_decoding`), which GRPO did move."
        if res.get("rewrite_decoding") == "fresh_copy"
        else "Their rewrites were decoded by the same deep copies, that is by the SFT writer's weights."
    )
    return [
        "**The GRPO candidates of this run were trained from deep copies of the SFT writer**, and a deep copy of a "
        "writer a trainer has run on computes with the original's weights (`rl.writer.model.fresh_copy`): their GRPO "
        "rollouts were sampled by the SFT writer, not by the writer being trained. " + decoded,
        "",
    ]


def _scored_with(res: dict) -> str:
    """Which reward scored the held-out windows when a candidate other than the experiment's own was selected."""
    sel = res.get("selection")
    overrides = sel["candidates"][sel["selected"]]["overrides"] if sel else {}
    if not overrides:
        return ""
    named = ", ".join(f"{k}={v}" for k, v in overrides.items())
    return f", both scored with the selected writer's reward ({named})"


def _memory(res: dict) -> str:
    rss = f"{res['max_rss_mb']:,.0f} MB resident at most"
    peak = res.get("peak_memory_mb")
    return f"peak memory {peak:,.0f} MB above the start ({rss})" if peak is not None else rss


def _writes_table(res: dict, path: Path) -> str:
    rows = []
    for arm in ("sft", "grpo"):
        w = field(res, path, "writes", arm)
        f = w["generation_failures"]
        rows.append(
            [arm, f"{w['windows']:,}", f"{w['triples']:,}", f"{res['graphs'][arm]['entity_edge_count']:,}"]
            + [f"{f['empty']:,}", f"{f['not_well_formed']:,} ({f['not_well_formed_share']:.1%})"]
            + [f"{f['unparsed_lines']:,} of {f['lines']:,} ({f['unparsed_line_share']:.1%})", _cut(f)]
            + [_named(w.get("entities"))]
        )
    f = field(res, path, "grpo", "generation_failures")
    rows.append(
        ["GRPO rollouts", f"{f['completions']:,} completions", "–", "–", f"{f['empty']:,}"]
        + [f"{f['not_well_formed']:,} ({f['not_well_formed_share']:.1%})"]
        + [f"{f['unparsed_lines']:,} of {f['lines']:,} ({f['unparsed_line_share']:.1%})", _cut(f), "–"]
    )
    header = ["writer", "windows", "triples", "entity edges", "empty", "not well-formed", "unparsed lines", "cut lines"]
    header.append("entities their fragment names")
    builder = res["graphs"]["builder"]["entity_edge_count"]
    return markdown_grid(header, rows) + f"\n\nThe builder's test graphs hold {builder:,} entity edges."


def _named(entities: dict | None) -> str:
    """Heads and tails written, and how many their anchor fragment names (``writes.<arm>.entities``; not recorded
    before the count existed)."""
    if not entities:
        return "not recorded"
    share = entities["named_by_anchor"] / entities["written"] if entities["written"] else 0.0
    return f"{entities['named_by_anchor']:,} of {entities['written']:,} ({share:.0%})"


def _cut(failures: dict) -> str:
    return f"{failures['cut_lines']:,}" if "cut_lines" in failures else "–"


def _evolution(res: dict, path: Path) -> list[str]:
    evo = res.get("self_evolution")
    if not evo:
        return [
            "### Self-evolution",
            "",
            "Not in this results file (`self_evolution=false`, or the round did not finish).",
            "",
        ]
    w, recall = field(evo, path, "writes"), field(evo, path, "reader_recall")
    f = w["generation_failures"]
    labels = {name.replace("_minus_", " − "): name for name in field(res, path, "paired")}
    rows = [_diff_row(label, evo["paired"][name]) for label, name in labels.items()]
    rows += [_diff_row(label, evo["paired"][name]) for name, label in EVOLVED]
    return [
        "### Self-evolution: the reader recalibrated on GRPO-written training graphs",
        "",
        f"The GRPO writer rewrote the {len(evo['rewritten'])} training and validation graphs "
        f"({w['windows']:,} windows, {w['triples']:,} triples, "
        f"{f['not_well_formed_share']:.1%} of completions not well-formed, "
        f"{w['seconds'] / 60:.1f} min); a reader of the same settings was trained on them "
        f"({evo['reader']['seconds']:.0f} s) and answered the same test questions over the arms:",
        "",
        _recall_table(recall),
        "",
        markdown_grid(["difference", "first", "second", "Δ recall", "95% CI", "p", "n"], rows),
        "",
    ]


def _targets(res: dict, path: Path) -> list[str]:
    gs, gb = field(res, path, "paired", "grpo_minus_sft"), field(res, path, "paired", "grpo_minus_builder")
    tr = field(res, path, "task_reward")
    met_recall = gs is not None and gs["mean_diff"] >= RECALL_TARGET and gs["ci_low"] > 0
    not_below = gb is not None and gb["ci_high"] >= 0
    met_reward = tr["after"] - tr["before"] >= REWARD_TARGET
    return [
        f"- reader recall, GRPO − SFT ≥ +{RECALL_TARGET} with the CI above 0: "
        + ("met" if met_recall else "not met")
        + (f" ({gs['mean_diff']:+.4f} [{gs['ci_low']:+.4f}, {gs['ci_high']:+.4f}], n = {gs['n']})" if gs else ""),
        "- reader recall on GRPO-written graphs not below the builder's (CI of GRPO − builder reaching 0 or above): "
        + ("met" if not_below else "not met")
        + (f" ({gb['mean_diff']:+.4f} [{gb['ci_low']:+.4f}, {gb['ci_high']:+.4f}])" if gb else ""),
        f"- held-out task reward after GRPO ≥ before + {REWARD_TARGET}: "
        + ("met" if met_reward else "not met")
        + f" ({tr['before']:.4f} → {tr['after']:.4f})",
    ]


def _measured(res: dict, path: Path) -> list[str]:
    recall = field(res, path, "reader_recall")
    paired = field(res, path, "paired")
    tr = field(res, path, "task_reward")
    parts = tr["parts"]
    part_rows = [[arm, *(f"{parts[arm][k]:.4f}" for k in ("r_rec", "r_pre", "rho_rep", "task"))] for arm in parts]
    out = [
        "### The run",
        "",
        "```bash",
        field(res, path, "command"),
        "```",
        "",
        *_candidate_caution(res),
        *_setting(res, path),
        "",
        "### Reader recall on the test graphs",
        "",
        _recall_table(recall),
        "",
        "Paired per test question (10,000-resample percentile bootstrap 95 % CI; p of the paired t-test):",
        "",
        markdown_grid(
            ["difference", "first", "second", "Δ recall", "95% CI", "p", "n"],
            [_diff_row(name.replace("_minus_", " − "), c) for name, c in paired.items()],
        ),
        "",
        "### Held-out task reward",
        "",
        f"`r_task − λ_rep·ρ_rep` per test window with gold evidence: SFT writer {tr['before']:.4f}, GRPO writer "
        f"{tr['after']:.4f}{_scored_with(res)}. Its parts (means over the windows):",
        "",
        markdown_grid(["writer", "r_rec", "r_pre", "ρ_rep", "r_task − λ_rep·ρ_rep"], part_rows),
        "",
        "Paired by window:",
        "",
        markdown_grid(
            ["difference", "GRPO", "SFT", "Δ reward", "95% CI", "p", "n"], [_diff_row("grpo − sft", tr["paired"])]
        ),
        "",
        "### What the writers wrote",
        "",
        "Greedy completions over every window of the test graphs, and GRPO's sampled rollouts on training "
        "windows (a line is unparsed when it is not an anchored triple citing one of its window's labels):",
        "",
        _writes_table(res, path),
        "",
    ]
    if res.get("curve_png"):
        out += [
            "### GRPO reward per step",
            "",
            f"![GRPO reward parts per step](results/{res['curve_png']})",
            "",
            "Per step the mean trained reward and, as moving means, its parts `r_task − λ_rep·ρ_rep`, `r_fmt`, "
            "the well-formed share, `r_rec`, `r_pre` and `ρ_rep` (the same series are in the run's W&B offline run "
            "with `writer.report_to=wandb`)." + _zero_variance(res["grpo"].get("curve") or []),
            "",
        ]
    return out


def _zero_variance(curve: list[dict]) -> str:
    """The mean share of GRPO groups whose completions all earned the same reward (TRL's ``frac_reward_zero_std``):
    such a group's advantages are all 0, and it gives no gradient."""
    shares = [c["frac_reward_zero_std"] for c in curve if "frac_reward_zero_std" in c]
    if not shares:
        return ""
    return (
        f" Over the {len(shares)} steps, {sum(shares) / len(shares):.0%} of the groups on average had one reward for "
        "all their completions: their advantages are 0, and they give no gradient."
    )


def _selection(res: dict, path: Path) -> list[str]:
    """The GRPO candidates (``reward_candidates``: overrides of the reward or of training) and their validation
    recall, when the run had them."""
    sel = res.get("selection")
    if not sel:
        return []
    rows = [["SFT writer (the warm start)", "", f"{sel['sft_val_recall']:.4f}", "", "", "", ""]]
    for i, c in enumerate(sel["candidates"]):
        d = c["val_minus_sft"]
        overrides = ", ".join(f"{k}={v}" for k, v in c["overrides"].items()) or "the experiment's settings"
        rows.append(
            [
                f"GRPO, {overrides}" + (" (selected)" if i == sel["selected"] else ""),
                f"{c['entity_edges']:,}",
                f"{c['val_recall']:.4f}",
                f"{d['mean_diff']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]",
                f"{d['n']}",
                f"{c['grpo']['seconds']:.0f}",
                _moved(c["grpo"].get("weight_change")),
            ]
        )
    graphs = res["graphs"]
    same = graphs["grpo"]["entity_edges"] == graphs["sft"]["entity_edges"]
    return [
        "### The GRPO candidates, chosen on the validation graphs",
        "",
        "One GRPO writer per candidate (overrides of the writer's reward or training settings), each from the same "
        "SFT writer; each rewrote the validation graphs "
        f"{', '.join(sel['val'])}, and the one whose graphs gave the frozen reader the highest recall there rewrote "
        "the test graphs (the GRPO arm above):",
        "",
        markdown_grid(
            ["writer", "validation entity edges", "validation recall", "− SFT [95% CI]", "n", "GRPO s", "‖Δθ‖/‖θ‖"],
            rows,
        ),
        "",
        "‖Δθ‖/‖θ‖ is how far GRPO moved the trained parameters from the SFT writer's (`grpo.weight_change`). "
        + (
            "The selected writer's test graphs hold exactly the SFT writer's entity edges (the same digest): "
            "its greedy triples did not change on any test window."
            if same
            else "The selected writer's test graphs differ from the SFT writer's in their entity edges."
        ),
        "",
    ]


def _moved(change: dict | None) -> str:
    """``weight_change.relative_l2`` of a GRPO summary, or that the run did not record it."""
    return "not recorded" if change is None else f"{change['relative_l2']:.2e}"


def _link_check(results_dir: Path, dataset: str) -> list[str]:
    """The validation check of entity linking (``link_check.py``), when its results file exists."""
    name = f"writer_link_check_{dataset}.json"
    res = load_results(results_dir, name)
    if res is None:
        return []
    path = Path(results_dir) / name
    recall, edges = field(res, path, "reader_recall"), field(res, path, "entity_edges")
    paired = field(res, path, "paired")
    return [
        "### Entity linking, checked on the validation graphs",
        "",
        f"Before any writer is trained, `{field(res, path, 'command')}` puts the builder's silver triples (what the "
        f"warm start imitates; {field(res, path, 'triples'):,} triples"
        + (", their entities taken from the text the prompt shows" if res.get("shown_only") else "")
        + f") into the validation graphs "
        f"{', '.join(field(res, path, 'graphs'))}, not linked and linked by mention, and the frozen reader answers "
        f"their {field(res, path, 'questions'):,} questions:",
        "",
        markdown_grid(
            ["validation graphs", "entity edges", "evidence recall"],
            [[label, f"{edges[a]:,}", f"{recall[a]:.4f}"] for a, label in LINK_ARMS if a in recall],
        ),
        "",
        markdown_grid(
            ["difference", "first", "second", "Δ recall", "95% CI", "p", "n"],
            [_diff_row(k.replace("_minus_", " − "), c) for k, c in paired.items()],
        ),
        "",
        *_by_window(res.get("by_window"), int(field(res, path, "fragments_per_task")) if "by_window" in res else 0),
    ]


WINDOW_GROUPS = (
    ("one_window", "all in one window"),
    ("across_windows", "in different windows"),
)


def _by_window(groups: dict | None, k: int) -> list[str]:
    """What entity edges add over none, split by where the questions' gold passages lie (``by_window``)."""
    if not groups:
        return []
    rows = []
    for group, label in WINDOW_GROUPS:
        g = groups[group]
        for arm in ("builder", "silver_linked"):
            c = g[f"{arm}_minus_none"]
            total = "–" if c is None else f"{c['mean_diff'] * c['n']:+.2f}"
            rows.append(_diff_row(f"{label}: {arm} − none", c) + [total])
    return [
        f"Split by where a question's gold passages lie (questions with two or more; windows of {k} consecutive "
        "passages, as the writer reads them). A reward read on a window's own graph scores only the first group:",
        "",
        markdown_grid(["gold passages", "first", "second", "Δ recall", "95% CI", "p", "n", "Δ × n"], rows),
        "",
    ]


def render(results_dir: Path) -> str:
    out = [fill(TEMPLATE, "intro"), ""]
    for name, heading, overrides, dataset in SETS:
        path = Path(results_dir) / name
        res = load_results(results_dir, name)
        out += [f"## {heading}", ""]
        out += _link_check(results_dir, dataset) if dataset else []
        if res is None:
            out += [f"Not measured yet: `{COMMAND}{overrides}` writes `docs/results/{name}`.", ""]
            continue
        out += (
            _measured(res, path)
            + _selection(res, path)
            + _evolution(res, path)
            + ["### Targets", "", *_targets(res, path), ""]
        )
    out += [fill(TEMPLATE, "reading"), ""]
    return "\n".join(out).rstrip() + "\n"
