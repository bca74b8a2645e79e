"""A live memory grown turn by turn against the batch graph: equal graphs, and the trained walk's ranked lists.

    python scripts/studies/live_memory/run.py --graphset outputs/graphs/locomo \\
        --checkpoints outputs/train/locomo_fold{0,1,2,3,4}/fold*/router/best.pt \\
        --out docs/results/memory_equivalence.json

For every conversation of a LoCoMo graph set (built with the batch rules, ``scripts/build_graph.py data=locomo``):

* ``given``: its turns are added one ``Memory.add`` at a time with the set's embeddings of their node texts; the
  memory's graph is compared with the batch builder's graph of the same embeddings under ``graph.incremental=true``
  (nodes, texts, keys, metadata, embeddings, every edge with its features and counters);
* ``encoded``: the memory embeds each turn itself with the set's encoder (one text per call); its edges (source,
  target, relation) are counted against the same batch graph, with the largest feature and embedding differences
  (a turn embedded alone may differ in the last bits from the batched embedding).

Then each trained walk of ``--checkpoints`` (one per fold, configured as ``configs/policy/router.yaml``) ranks its
test questions (the graphs its checkpoint names neither as training nor as validation graphs) on the batch graph and
on both memories, with the set's query embeddings: the count of identical ranked lists and the paired evidence-recall
difference (95% bootstrap CI, paired t-test) of memory minus batch, and of the incremental-rule batch graph minus
the set's own graph (what the arrival-order rules change for a walk trained on batch graphs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from graphmem import Memory
from graphmem.builders.config import GraphConfig
from graphmem.builders.entities import make_entity_extractor
from graphmem.builders.locomo import build_locomo_graph, turn_records
from graphmem.config.cli import policy_config, set_threads
from graphmem.config.entry import command
from graphmem.core import Budget
from graphmem.core.errors import InputError
from graphmem.core.graph import edge_table
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file
from graphmem.eval.harness import evaluate_policy
from graphmem.eval.stats import paired_comparison
from graphmem.policies import make_policy
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json


def _edges(graph) -> dict[tuple, tuple]:
    """(source id, target id, relation) -> the edge's features."""
    return {(s, d, r): a for s, d, r, a, *_ in edge_table(graph)}


def same_nodes(a, b) -> bool:
    return (
        a.node_ids == b.node_ids
        and a.texts == b.texts
        and a.keys == b.keys
        and a.metadata == b.metadata
        and torch.equal(a.embeddings, b.embeddings)
        and torch.allclose(a.timestamps, b.timestamps, equal_nan=True)
    )


class Graphs:
    """A graph set's questions and queries over other graphs of the same names (what evaluate_policy reads)."""

    def __init__(self, gs: GraphSet, graphs: dict):
        self.dataset, self.graphs, self.questions, self._queries = gs.dataset, graphs, gs.questions, gs.queries()

    def queries(self):
        return self._queries


def grow(folder: Path, conv, emb, encoder: str, given: bool):
    """A memory of ``conv`` grown one add at a time; its graph (the memory is closed)."""
    with Memory.open(folder, encoder=encoder) as mem:
        for i, r in enumerate(turn_records(conv)):
            mem.add(
                r.text,
                speaker=r.speaker,
                time=r.time,
                session=r.session,
                id=r.id,
                meta=r.meta,
                embedding=emb[i] if given else None,
            )
        return mem.graph.copy()


def build_all(gs: GraphSet, tmp: Path) -> tuple[dict, dict, dict, list[dict]]:
    """Batch graphs with the incremental rules, and the two memories' graphs, per conversation; the comparison rows."""
    settings = {k: v for k, v in (gs.provenance.get("graph") or {}).items() if k != "cache_dir"}
    if gs.dataset != "locomo" or "encoder" not in settings:
        raise InputError(f"{gs.provenance.get('folder')}: a LoCoMo graph set with its graph settings is needed")
    encoder = settings["encoder"]
    cfg = GraphConfig.from_mapping({**settings, "incremental": True})
    extractor = make_entity_extractor(cfg.entity_extractor)
    data = gs.provenance.get("data") or {}
    convs = {c.sample_id: c for c in load_locomo(data_file(data.get("file", "locomo/locomo_dev8.json")))[0]}
    batch, given, encoded, rows = {}, {}, {}, []
    for name, graph in sorted(gs.graphs.items()):
        conv = convs[name]
        batch[name] = build_locomo_graph(conv, graph.embeddings, cfg, extractor)
        given[name] = grow(tmp / f"{name}-given", conv, graph.embeddings, encoder, True)
        t = time.perf_counter()
        encoded[name] = grow(tmp / f"{name}-encoded", conv, graph.embeddings, encoder, False)
        wall = time.perf_counter() - t
        b, e = _edges(batch[name]), _edges(encoded[name])
        common = sorted(set(b) & set(e))
        rows.append(
            {
                "graph": name,
                "turns": graph.num_nodes,
                "edges": batch[name].num_edges,
                "given_equal": same_nodes(batch[name], given[name])
                and edge_table(batch[name]) == edge_table(given[name]),
                "encoded_edges_only_in_batch": len(set(b) - set(e)),
                "encoded_edges_only_in_memory": len(set(e) - set(b)),
                "encoded_max_feature_diff": max((abs(x - y) for k in common for x, y in zip(b[k], e[k])), default=0.0),
                "encoded_max_embedding_diff": float((encoded[name].embeddings - graph.embeddings).abs().max()),
                "encoded_turns_per_s": graph.num_nodes / wall,
            }
        )
        print(f"{name}: {rows[-1]}", flush=True)
    return batch, given, encoded, rows


def compare_walks(gs: GraphSet, graphs: dict[str, dict], checkpoints: list[str]) -> list[dict]:
    """Per checkpoint, its test questions ranked on each graph variant: identical lists and paired recall."""
    out, budget = [], Budget()
    for path in checkpoints:
        policy = make_policy({**policy_config("router"), "checkpoint": path})
        seen = set(policy.trained_inputs.get("train_graphs", [])) | set(policy.trained_inputs.get("val_graphs", []))
        questions = [q for q in gs.questions if q.graph not in seen]
        runs = {k: evaluate_policy(policy, Graphs(gs, g), budget, questions, progress=False) for k, g in graphs.items()}
        recall = {k: {r["qid"]: r["metrics"]["evidence_recall"] for r in run.rows} for k, run in runs.items()}
        ranked = {k: {r["qid"]: r["ranked"] for r in run.rows} for k, run in runs.items()}
        row = {"checkpoint": path, "questions": len(questions), "test_graphs": sorted({q.graph for q in questions})}
        for a, b in (("given", "batch"), ("encoded", "batch"), ("batch", "set")):
            row[f"identical_{a}_vs_{b}"] = sum(ranked[a][q] == ranked[b][q] for q in ranked[a])
            c = paired_comparison(a, recall[a], b, recall[b], "evidence_recall")
            row[f"paired_{a}_vs_{b}"] = None if c is None else c.to_json()
        out.append(row)
        print(
            f"{path}: {row['questions']} questions, identical lists given/batch {row['identical_given_vs_batch']}",
            flush=True,
        )
    return out


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphset", required=True, help="a LoCoMo graph set built with the batch rules")
    ap.add_argument("--checkpoints", nargs="*", default=[], help="trained walks, one per fold")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("outputs/live_memory/memory_equivalence.json"))
    return ap


def work(args: argparse.Namespace) -> None:
    """Build the set's conversations the four ways, compare their graphs and walks, write the results."""
    set_threads({"threads": args.threads})
    gs = GraphSet.load(args.graphset)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        batch, given, encoded, rows = build_all(gs, Path(tmp))
    walks = compare_walks(gs, {"set": gs.graphs, "batch": batch, "given": given, "encoded": encoded}, args.checkpoints)
    payload = {
        "command": "python " + " ".join(sys.argv),
        "graphset": gs.dataset,
        "encoder": gs.provenance.get("encoder"),
        "conversations": rows,
        "walks": walks,
        "wall_s": time.perf_counter() - t0,
    }
    write_json(args.out, payload)
    print(f"written to {args.out}")


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv, errors=(OSError,))


if __name__ == "__main__":
    sys.exit(main())
