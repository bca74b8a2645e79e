"""Per-question evidence recall of the heuristic baselines on every question of a graph set (research script).

    python scripts/research/baselines.py /work/main/outputs/graphs/locomo outputs/research/baselines_locomo.json

Writes ``{policy: {qid: recall}}`` from the evaluation harness (categories as the harness scores them;
questions without resolvable gold are left out).
"""

from __future__ import annotations

import json
import sys

import torch

from graphmem.eval.harness import evaluate_policy
from graphmem.graphset import GraphSet
from graphmem.policies.base import Budget, make_policy


def main(path: str, out: str, policies=("dense_topk", "ppr", "beta_bfs")) -> None:
    gs = GraphSet.load(path)
    table = {}
    for name in policies:
        res = evaluate_policy(make_policy(name), gs, Budget(), progress=False)
        table[name] = {
            r["qid"]: r["metrics"]["evidence_recall"] for r in res.rows if r["metrics"]["evidence_recall"] is not None
        }
        table[name + ":support_sentence"] = {
            r["qid"]: r["metrics"]["support_sentence_recall"]
            for r in res.rows
            if r["metrics"]["support_sentence_recall"] is not None
        }
        table[name + ":support_paragraph"] = {
            r["qid"]: r["metrics"]["support_paragraph_recall"]
            for r in res.rows
            if r["metrics"]["support_paragraph_recall"] is not None
        }
        print(name, res.overall["evidence_recall"], flush=True)
    with open(out, "w") as f:
        json.dump(table, f)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
