"""GraphMemory's Retrieve-Generate-Reflect-Curate loop end to end on a slice of one graph.

    python scripts/memory_loop.py                          # local SmolLM2 through litellm, offline
    python scripts/memory_loop.py llm=openai graph_name=... n_questions=50

For each of the first ``n_questions`` questions of graph ``graph_name`` (in graph-set order),
:class:`graphmem.memory_loop.MemoryLoop` retrieves (LLM entry selection over the compact index,
then Beta BFS), generates an answer and influence trace, and only then receives feedback on the
prediction; the Reflector's labels update the Beta counters (eq. 21) and the Curator's validated
edits change the graph. The graph is a copy: the saved graph set is not modified.

Prints the counts of calls, tokens, applied transitions and edits, and discarded items, and writes
one JSON line per example (``trace.jsonl``) and the totals (``summary.json``) in ``out_dir``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

import graphmem.config  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.cli import run_or_exit
from graphmem.eval.harness import write_jsonl
from graphmem.graphset import GraphSet, open_graphset
from graphmem.io import atomic_write
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.memory_loop import ExampleRecord, MemoryLoop
from graphmem.policies.base import Budget
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.policies.entries import make_entry_selector


def feedback_note(answer: str | None) -> Any:
    """The environment's feedback on a prediction, built after the prediction exists (eq. 22)."""

    def note(prediction: str) -> str:
        if answer is None:
            return f"Prediction: {prediction or '(none)'}. No reference answer is available."
        return f"Prediction: {prediction or '(none)'}. Reference answer: {answer}."

    return note


def record_json(rec: ExampleRecord, question_text: str, elapsed: float) -> dict[str, Any]:
    return {
        "qid": rec.qid,
        "question": question_text,
        "prediction": rec.prediction,
        "loaded": rec.loaded,
        "trace": rec.trace,
        "applied_transitions": [list(t) for t in rec.applied_transitions],
        "applied_ops": rec.applied_ops,
        "discarded": rec.discarded,
        "tokens": rec.tokens,
        "entries": [] if rec.retrieval is None else rec.retrieval.entries,
        "seconds": elapsed,
    }


def run(cfg: DictConfig) -> dict[str, Any]:
    out = Path(hydra.utils.to_absolute_path(cfg.out_dir))
    out.mkdir(parents=True, exist_ok=True)
    saved = hydra.utils.to_absolute_path(cfg.graphset) if cfg.get("graphset") else None
    gs: GraphSet = open_graphset(
        saved,
        OmegaConf.to_container(cfg.data, resolve=True),
        OmegaConf.to_container(cfg.graph, resolve=True),
        hydra.utils.to_absolute_path(cfg.graphset_dir),
        progress=cfg.progress,
    )
    name = cfg.graph_name or sorted(gs.graphs)[0]
    if name not in gs.graphs:
        raise KeyError(f"graph {name!r} is not in the graph set; have {sorted(gs.graphs)}")
    graph = gs.graphs[name].copy()
    idx = [i for i, q in enumerate(gs.questions) if q.graph == name][: cfg.n_questions]
    queries = gs.queries()

    llm_cfg = OmegaConf.to_container(cfg.llm, resolve=True)
    if llm_cfg.get("cache_dir"):
        llm_cfg["cache_dir"] = hydra.utils.to_absolute_path(llm_cfg["cache_dir"])
    client = LLMClient(LLMConfig.from_dict(llm_cfg))
    entries = (
        make_entry_selector(cfg.entries, client=client) if cfg.entries == "llm" else make_entry_selector(cfg.entries)
    )
    encoder = None

    def embed(texts):
        nonlocal encoder
        if encoder is None:
            from graphmem.embed import make_encoder

            encoder = make_encoder(cfg.encoder)
        return encoder.encode(list(texts))

    budget = Budget(**OmegaConf.to_container(cfg.budget, resolve=True))
    loop = MemoryLoop(client, BetaBFS(entries=entries), embed=embed, budget=budget, max_tokens=cfg.max_tokens)
    nodes0, edges0 = graph.num_nodes, graph.num_edges
    print(f"graph {name}: {nodes0} nodes, {edges0} edges; {len(idx)} questions; model {client.model}", flush=True)
    rows, discarded, ops = [], Counter(), Counter()
    n_transitions = 0
    for i in idx:
        t0 = time.perf_counter()
        rec = loop.step(graph, queries[i], feedback_note(gs.questions[i].answer))  # answer read only after predict
        rows.append(record_json(rec, gs.questions[i].text, time.perf_counter() - t0))
        discarded.update(rec.discarded)
        ops.update(op.split()[0] for op in rec.applied_ops)
        n_transitions += len(rec.applied_transitions)
        print(
            f"  {rec.qid}: loaded {len(rec.loaded)}, trace {len(rec.trace)}, transitions "
            f"{len(rec.applied_transitions)}, ops {len(rec.applied_ops)}, discarded {sum(rec.discarded.values())} "
            f"({rows[-1]['seconds']:.1f}s)",
            flush=True,
        )
    graph.validate()
    usage = client.usage_report()
    summary = {
        "graph": name,
        "questions": len(idx),
        "model": usage["model"],
        "local_substitute": usage["local_substitute"],
        "calls": {r: u["calls"] for r, u in usage["roles"].items()},
        "total_calls": usage["total"].get("calls", 0),
        "requests": usage["total"].get("requests", 0),
        "cache_hits": usage["total"].get("cache_hits", 0),
        "prompt_tokens": usage["total"].get("prompt_tokens", 0),
        "completion_tokens": usage["total"].get("completion_tokens", 0),
        "memory_tokens": sum(r["tokens"].get("memory", 0) for r in rows),
        "index_tokens": sum(r["tokens"].get("index", 0) for r in rows),
        "applied_transitions": n_transitions,
        "edits": dict(ops),
        "discarded": dict(discarded),
        "client_failures": client.failure_summary()["by_role_kind"],
        "entry_selection": {k: v for k, v in vars(entries.stats).items() if k != "last_sections"}
        if hasattr(entries, "stats")
        else {},
        "graph_before": {"nodes": nodes0, "edges": edges0},
        "graph_after": {
            "nodes": graph.num_nodes,
            "edges": graph.num_edges,
            "S_total": float(graph.S.sum()),
            "F_total": float(graph.F.sum()),
        },
        "usage": usage,
    }
    write_jsonl(rows, out / "trace.jsonl")
    atomic_write(out / "summary.json", lambda tmp: tmp.write_text(json.dumps(summary, indent=1, default=str)))
    brief = {k: v for k, v in summary.items() if k != "usage"}
    print(json.dumps(brief, indent=1, default=str))
    print(f"trace written to {out / 'trace.jsonl'}")
    return summary


@hydra.main(version_base="1.3", config_path="../configs", config_name="memory_loop")
def main(cfg: DictConfig) -> None:
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    run_or_exit(run, cfg)


if __name__ == "__main__":
    main()
