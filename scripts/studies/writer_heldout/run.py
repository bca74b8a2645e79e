"""The GRPO writer measured on held-out conversations (SAGE §4.1's reader-aware reward, its held-out protocol).

    python scripts/studies/writer_heldout/run.py                    # LoCoMo, SmolLM2 writer, docs/results/
    python scripts/studies/writer_heldout/run.py experiment=writer_heldout_smoke results=/tmp/w.json

One command, in order, on fold ``split.fold`` of the conversation split (``configs/split/default.yaml``):

1. the GNN reader is trained on the *training* conversations (best epoch on the validation ones), then frozen;
2. the writer (``writer.model``, only its last ``writer.trainable_layers`` blocks trained) is warm-started with
   SFT on silver triples of training-conversation windows (:func:`rl.writer.run.run_warm_start`);
3. the SFT writer writes every window of the *test* graphs: its triples replace their ``entity`` edges
   (:func:`rl.writer.grpo.rewrite_entity_edges`, the builder's rule and caps from the set's manifest), arm (b);
4. GRPO on training-conversation tasks against the frozen reader (:func:`rl.writer.run.run_writer`);
5. the GRPO writer rewrites the same test graphs, arm (c);
   with two or more ``reward_candidates`` (overrides of ``writer``, e.g. ``[{}, {beta: 0.0}]``), step 4 trains one
   GRPO writer per candidate, each from a copy of the same SFT writer; each rewrites the *validation* graphs, and
   the candidate whose graphs give the frozen reader the highest validation recall (the first on a tie) is the
   one that rewrites the test graphs (``selection`` in the results, with the SFT writer's validation recall);
6. with ``self_evolution``, one round of SAGE's self-evolution: the GRPO writer also rewrites the training and
   validation graphs, a reader of the same settings is trained on those (best validation epoch), and the three
   test arms are measured again with this recalibrated reader (``self_evolution`` in the results).

The frozen reader (policy ``gnn``) is evaluated on the test questions over (a) the builder's graphs, (b) and (c),
and over the test graphs with no entity edge at all (arm ``none``: how much entity edges can move the reader):
evidence recall per question, LoCoMo's adversarial category left out as in the overall tables, compared
paired by question (:func:`graphmem.eval.stats.paired_comparison`: mean difference, bootstrap 95 % CI, n):
``grpo_minus_sft``, ``grpo_minus_builder``, ``sft_minus_builder``, ``builder_minus_none``, ``grpo_minus_none``.
The *held-out task reward* is the trained (selected) reward's task part ``r_task − λ_rep ρ_rep`` (``r_rec``, ``r_pre``,
``ρ_rep``) of each test task window (``writer.min_gold``), scored on the same greedy completions that rewrote the
graphs, SFT against GRPO paired by task.
The arms share the nodes, the non-entity edges and the reader; only the test graphs' entity edges differ
(``graphs`` in the results: a digest of each part). Writes ``results`` (JSON, with its command, wall time and
peak memory) and the GRPO reward curve of its parts beside it (PNG).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import resource
import time
from dataclasses import asdict
from pathlib import Path

from frozen import command_line, frozen_reader, paired_json, reader_recall
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import GraphConfig
from graphmem.config.cli import load_graphset, restrict_graphs, set_threads
from graphmem.config.entry import main, typed
from graphmem.core import Budget
from graphmem.store.io import atomic_write, write_json
from graphmem.tracking.peak_memory import PeakMemory
from rl.gnn.split import split_examples
from rl.writer.format import judged_lines, parse_triples
from rl.writer.grpo import (
    ReaderReward,
    WriterConfig,
    generate_completions,
    generation_failures,
    graph_windows,
    named_by_anchor,
    rewrite_entity_edges,
    tasks_from_graphset,
)
from rl.writer.model import trainable_copy
from rl.writer.run import plot_curve, report_to_wandb, run_warm_start, run_writer
from rl.writer.sft import SFTConfig

log = logging.getLogger(__name__)
ARMS = ("builder", "sft", "grpo", "none")
HELD_OUT_TASKS = ("fragments_per_task", "min_gold", "reward_graph", "link_mentions", "grounded", "reader_budget")
"""writer settings that define the held-out task windows and how their reward is read: one for every candidate"""
PAIRS = (("grpo", "sft"), ("grpo", "builder"), ("sft", "builder"), ("builder", "none"), ("grpo", "none"))


def write_arm(model, tokenizer, gs, names, wcfg: WriterConfig, graph_cfg: GraphConfig, reward, batch: int):
    """The writer's greedy triples over every window of the graphs ``names``: the graphs with their entity
    edges rewritten, the held-out task reward parts of each window in ``reward.tasks`` (none when ``reward`` is
    None), the counts of completions and lines that did not parse (:func:`rl.writer.grpo.generation_failures`) and
    the completions themselves (``completions``: window, whether cut, text)."""
    graphs, tasks, records, triples, written = {}, {}, [], 0, []
    for name in names:
        graph = gs.graphs[name]
        windows = graph_windows(graph, wcfg.fragments_per_task, name)
        texts, cuts = generate_completions(model, tokenizer, windows, wcfg, batch)
        found = []
        for window, text, cut in zip(windows, texts, cuts):
            written.append({"window": window.task_id, "cut": cut, "text": text})
            parsed, good, total = parse_triples(text, window.fragment_ids, cut)
            found += parsed
            entities, named = named_by_anchor(parsed, window.fragment_ids, window.texts)
            records.append(
                {"lines": total, "valid_lines": good, "well_formed": total > 0 and good == total}
                | {"cut_lines": judged_lines(text, cut)[1], "entities": entities, "named": named}
            )
            if reward is not None and window.task_id in reward.tasks:
                parts = reward.components(text, window.task_id, cut)
                tasks[window.task_id] = {k: parts[k] for k in ("r_rec", "r_pre", "rho_rep", "r_task")}
                tasks[window.task_id]["task"] = parts["r_task"] - wcfg.lambda_rep * parts["rho_rep"]
        graphs[name] = rewrite_entity_edges(graph, found, graph_cfg, wcfg.link_mentions, wcfg.grounded)
        triples += len(found)
    failures = generation_failures(records)
    log.info("rewrite: %d triples over %d windows; %s", triples, len(records), failures)
    # heads and tails written, and those their anchor fragment names (what writer.grounded keeps)
    entities = {"written": sum(r["entities"] for r in records), "named_by_anchor": sum(r["named"] for r in records)}
    summary = {"triples": triples, "windows": len(records), "generation_failures": failures, "tasks": tasks}
    return graphs, summary | {"entities": entities, "completions": written}


def save_completions(path: Path, completions: list[dict], tasks: dict[str, dict]) -> Path:
    """One JSON line per window: its completion (``window``, ``cut``, ``text``) and, for a held-out task window,
    its reward parts (``reward``)."""
    lines = [json.dumps(c | ({"reward": tasks[c["window"]]} if c["window"] in tasks else {})) for c in completions]
    return atomic_write(path, lambda tmp: Path(tmp).write_text("".join(line + "\n" for line in lines)))


def graph_digest(graphs) -> dict:
    """sha256 of the graphs' node ids, of their non-entity edges (source, target, relation, features) and of
    their entity edges, with the entity edge count: the parts the arms must share, and the one they change."""
    parts = {"nodes": [], "other_edges": [], "entity_edges": []}
    for name in sorted(graphs):
        g = graphs[name]
        edges = zip(g.edge_index[0].tolist(), g.edge_index[1].tolist(), g.edge_type.tolist(), g.edge_attr.tolist())
        rows = sorted((s, d, g.relations[t], tuple(round(a, 5) for a in attr)) for s, d, t, attr in edges)
        parts["nodes"].append((name, list(g.node_ids)))
        parts["other_edges"].append((name, [r for r in rows if r[2] != "entity"]))
        parts["entity_edges"].append((name, [r[:2] for r in rows if r[2] == "entity"]))
    out = {k: hashlib.sha256(repr(v).encode()).hexdigest() for k, v in parts.items()}
    return out | {"entity_edge_count": sum(len(e) for _, e in parts["entity_edges"])}


def self_evolution(cfg: DictConfig, gs, parts: dict, writer, graphs: dict, budget: Budget, out_dir: Path, frozen):
    """One round of SAGE's self-evolution (module docstring, step 6): ``writer = (model, tokenizer, wcfg, graph_cfg)``
    rewrites the training and validation graphs, a reader is trained on them, and the test arms ``graphs`` are
    measured with it; ``frozen`` is the frozen reader's recall per arm, for ``evolved_minus_frozen``."""
    model, tokenizer, wcfg, graph_cfg = writer
    names = list(parts["train"]) + list(parts["val"])
    t0 = time.perf_counter()
    written, writes = write_arm(model, tokenizer, gs, names, wcfg, graph_cfg, None, int(cfg.rebuild_batch))
    writes["seconds"] = round(time.perf_counter() - t0, 1)
    save_completions(out_dir / "completions_self_evolution.jsonl", writes.pop("completions"), {})
    evolved = dataclasses.replace(gs, graphs={**gs.graphs, **written})
    reader, info = frozen_reader(evolved, cfg, budget, out_dir / "self_evolution")
    test = parts["test"]
    recall = {arm: reader_recall(reader, gs, graphs[arm], test, budget) for arm in ARMS}
    paired = {f"{a}_minus_{b}": paired_json(a, recall[a], b, recall[b], "evidence_recall") for a, b in PAIRS}
    paired["evolved_minus_frozen"] = paired_json("evolved", recall["grpo"], "frozen", frozen["grpo"], "evidence_recall")
    paired["evolved_grpo_minus_frozen_builder"] = paired_json(
        "evolved_grpo", recall["grpo"], "frozen_builder", frozen["builder"], "evidence_recall"
    )
    return {
        "rewritten": names,
        "writes": writes,
        "graphs": graph_digest(written),
        "reader": info,
        "reader_recall": {arm: sum(v.values()) / max(len(v), 1) for arm, v in recall.items()},
        "paired": paired,
    }


def r_task(parts: dict, wcfg: WriterConfig) -> float:
    """``r_task = (α r_rec + β r_pre) / (α + β)`` of one window's reward parts under ``wcfg``'s weights."""
    return (wcfg.alpha * parts["r_rec"] + wcfg.beta * parts["r_pre"]) / (wcfg.alpha + wcfg.beta)


def select_grpo(cfg: DictConfig, gs, parts: dict, wcfg: WriterConfig, graph_cfg: GraphConfig, reader, sft_writer):
    """Step 4 with ``reward_candidates`` (module docstring): one GRPO writer per candidate, from copies of the SFT
    writer ``sft_writer = (model, tokenizer)``, chosen by the frozen reader's recall on the validation graphs
    they rewrite; ``(trainer, grpo summary, its WriterConfig, selection record)``."""
    model, tokenizer = sft_writer
    val, batch = list(parts["val"]), int(cfg.rebuild_batch)
    budget = typed(cfg.budget, Budget)

    def val_recall(written) -> dict:
        return reader_recall(reader, gs, written, val, budget)

    candidates = reward_candidates(cfg)
    sft_val, _ = write_arm(model, tokenizer, gs, val, wcfg, graph_cfg, None, batch)
    sft_recall = val_recall(sft_val)
    rows, best = [], None
    for i, overrides in enumerate(candidates):
        c = dataclasses.replace(wcfg, **(overrides or {}), output_dir=f"{wcfg.output_dir}/candidate_{i}")
        trainer, grpo, _ = run_writer(gs, cfg, c, reader, trainable_copy(model, c.trainable_layers), tokenizer)
        _finish_wandb(c)
        written, writes = write_arm(trainer.model, tokenizer, gs, val, c, graph_cfg, None, batch)
        recall = val_recall(written)
        row = {
            "overrides": overrides,
            "val_recall": _mean(recall),
            "val_minus_sft": paired_json("grpo", recall, "sft", sft_recall, "evidence_recall"),
            "entity_edges": graph_digest(written)["entity_edge_count"],
            "grpo": {k: v for k, v in grpo.items() if k != "curve"},
        }
        rows.append(row)
        log.info("reward candidate %d %s: validation recall %.4f", i, row["overrides"], row["val_recall"])
        if best is None or row["val_recall"] > best[0]:
            best = (row["val_recall"], i, trainer, grpo, c)
        del trainer, written
    _, picked, trainer, grpo, c = best
    selection = {"val": val, "sft_val_recall": _mean(sft_recall), "candidates": rows, "selected": picked}
    return trainer, grpo, c, selection


def reward_candidates(cfg: DictConfig) -> list[dict]:
    """``cfg.reward_candidates`` as overrides of ``writer``; one that changes a setting of :data:`HELD_OUT_TASKS`
    is a ValueError naming it (every candidate's held-out task reward is read on the same tasks, the same way)."""
    listed = cfg.get("reward_candidates")
    candidates = [c or {} for c in (OmegaConf.to_container(listed, resolve=True) if listed else [])]
    for overrides in candidates:
        if fixed := sorted(set(overrides) & set(HELD_OUT_TASKS)):
            raise ValueError(f"reward_candidates: {', '.join(fixed)} define the held-out tasks and cannot differ")
    return candidates


def _finish_wandb(wcfg: WriterConfig) -> None:
    """Close the W&B run the trainer reported to, so the next candidate's GRPO opens its own."""
    if "wandb" in wcfg.report_to:
        import wandb

        if wandb.run is not None:
            wandb.finish()


def _mean(values: dict) -> float:
    return sum(values.values()) / max(len(values), 1)


def measure(cfg: DictConfig, out_dir: Path, save=None) -> dict:
    """Steps 1-6 of the module docstring and the paired comparisons; the results payload less run facts.

    With ``self_evolution``, ``save`` (when given) is handed the payload of steps 1-5 before step 6 starts, so
    the results file holds them, whole, while the round runs."""
    wcfg = typed(cfg.writer, WriterConfig)
    reward_candidates(cfg)
    sft = typed(cfg.sft, SFTConfig)
    budget = typed(cfg.budget, Budget)
    gs = restrict_graphs(load_graphset(cfg), sorted(str(n) for n in cfg.get("graphs") or []))
    graph_cfg = GraphConfig(**gs.provenance["graph"])
    report_to_wandb(wcfg, gs, out_dir, "study")
    parts, _ = split_examples(gs, cfg.split, budget)
    test = parts["test"]
    reader, reader_info = frozen_reader(gs, cfg, budget, out_dir, cfg.writer.reader_checkpoint)
    held_out = tasks_from_graphset(gs, [i for i, q in enumerate(gs.questions) if q.graph in set(test)],
                                   wcfg.fragments_per_task, wcfg.min_gold, wcfg.reward_graph == "whole")  # fmt: skip
    reward = ReaderReward(held_out, reader, wcfg, graph_cfg=graph_cfg)
    model, tokenizer, warm = run_warm_start(gs, cfg, wcfg, sft)
    batch = int(cfg.rebuild_batch)
    graphs = {"builder": {n: gs.graphs[n] for n in test}}
    graphs["none"] = {n: rewrite_entity_edges(gs.graphs[n], [], graph_cfg) for n in test}  # no entity edge at all
    graphs["sft"], writes = write_arm(model, tokenizer, gs, test, wcfg, graph_cfg, reward, batch)
    writes = {"sft": writes}
    selection, trained = None, wcfg
    if len(reward_candidates(cfg)) > 1:
        trainer, grpo, trained, selection = select_grpo(cfg, gs, parts, wcfg, graph_cfg, reader, (model, tokenizer))
    else:
        trainer, grpo, _ = run_writer(gs, cfg, wcfg, reader, model, tokenizer)
    graphs["grpo"], writes["grpo"] = write_arm(trainer.model, tokenizer, gs, test, trained, graph_cfg, reward, batch)
    recall = {arm: reader_recall(reader, gs, graphs[arm], test, budget) for arm in ARMS}
    for w in writes.values():  # the task part of the reward the GRPO writer was trained on, for both arms
        for t in w["tasks"].values():
            t["r_task"] = r_task(t, trained)
            t["task"] = t["r_task"] - trained.lambda_rep * t["rho_rep"]
    task_reward = {arm: {t: v["task"] for t, v in writes[arm]["tasks"].items()} for arm in ("sft", "grpo")}
    for arm, w in writes.items():  # every greedy completion of the test windows, for reading what each writer wrote
        save_completions(out_dir / f"completions_{arm}.jsonl", w["completions"], w["tasks"])
    payload = {
        "split": parts,
        "writer": asdict(trained),
        "sft": asdict(sft),
        "budget": asdict(budget),
        "reader": reader_info,
        "questions": {"test": len(recall["builder"]), "test_tasks": len(held_out)},
        "reader_recall": {arm: sum(v.values()) / max(len(v), 1) for arm, v in recall.items()},
        "paired": {f"{a}_minus_{b}": paired_json(a, recall[a], b, recall[b], "evidence_recall") for a, b in PAIRS},
        "task_reward": {
            "before": sum(task_reward["sft"].values()) / max(len(task_reward["sft"]), 1),
            "after": sum(task_reward["grpo"].values()) / max(len(task_reward["grpo"]), 1),
            "parts": {arm: _part_means(writes[arm]["tasks"]) for arm in ("sft", "grpo")},
            "paired": paired_json("grpo", task_reward["grpo"], "sft", task_reward["sft"], "task_reward"),
        },
        "writes": {arm: {k: v for k, v in w.items() if k not in ("tasks", "completions")} for arm, w in writes.items()},
        "graphs": {arm: graph_digest(g) for arm, g in graphs.items()},
        "warm_start": warm,
        "grpo": grpo,
        "selection": selection,
        "self_evolution": None,
    }
    if cfg.self_evolution:
        if save is not None:
            save(payload)
        writer = (trainer.model, tokenizer, trained, graph_cfg)
        payload["self_evolution"] = self_evolution(cfg, gs, parts, writer, graphs, budget, out_dir, recall)
    return payload


def _part_means(tasks: dict[str, dict]) -> dict[str, float]:
    keys = ("r_rec", "r_pre", "rho_rep", "r_task", "task")
    return {k: sum(t[k] for t in tasks.values()) / max(len(tasks), 1) for k in keys}


def save_results(cfg: DictConfig, measured: dict, t0: float, peak_mb: float | None, threads: int) -> dict:
    """Write ``cfg.results`` (the run facts, then ``measured``) and the GRPO reward curve PNG beside it; the payload.

    ``peak_mb`` is ``None`` for the file written before the self-evolution round (the peak is known at the end)."""
    results = Path(cfg.results)
    curve = measured["grpo"]["curve"]
    png = results.with_suffix(".png")
    if curve:
        title = f"GRPO writer ({measured['writer']['model']}): reward parts per step"
        atomic_write(png, lambda tmp: plot_curve(curve, tmp, title, window=int(cfg.curve_window)))
    payload = {
        "command": cfg.get("command") or command_line("run.py"),
        "dataset": cfg.data.name,
        "fold": int(cfg.split.fold),
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_memory_mb": None if peak_mb is None else round(peak_mb, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": threads,
        # every arm's rewrites decoded by a new instance holding the writer's weights (rl.writer.model.fresh_copy),
        # and every reward candidate trained from one (trainable_copy)
        "rewrite_decoding": "fresh_copy",
        "candidate_copies": "trainable_copy",
        "curve_png": png.name if curve else None,
        **measured,
    }
    write_json(results, payload, indent=2)
    return payload


def run(cfg: DictConfig) -> dict:
    out_dir = Path(cfg.out_dir or HydraConfig.get().runtime.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = set_threads(cfg)
    t0 = time.perf_counter()
    with PeakMemory(interval_s=0.05) as peak:
        measured = measure(cfg, out_dir, lambda partial: save_results(cfg, partial, t0, None, threads))
    payload = save_results(cfg, measured, t0, peak.peak_mb, threads)
    log.info("reader recall %s; paired %s", payload["reader_recall"], payload["paired"])
    log.info("held-out task reward %s", {k: payload["task_reward"][k] for k in ("before", "after", "paired")})
    return payload


if __name__ == "__main__":
    main("writer_heldout", run)
