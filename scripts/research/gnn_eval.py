"""Per-question test recall of the GNN reader trained per fold (research script).

    for k in 0 1 2 3 4; do python scripts/train_gnn.py data=locomo graphset=/work/main/outputs/graphs/locomo \
        split.fold=$k checkpoint=outputs/research/gnn/fold$k.pt out_dir=outputs/research/gnn/fold$k; done
    python scripts/research/gnn_eval.py /work/main/outputs/graphs/locomo outputs/research/gnn \
        outputs/research/gnn_locomo.json

Evaluates each fold's reader with the harness on that fold's test graphs (from the checkpoint's
``.split.json``) and writes ``{"gnn": {qid: recall}, "gnn:support_sentence": ..., "gnn:support_paragraph": ...}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from graphmem.eval.harness import evaluate_policy
from graphmem.graphset import GraphSet
from graphmem.policies.base import Budget, make_policy


def main(graphset: str, folder: str, out: str) -> None:
    gs = GraphSet.load(graphset)
    table = {"gnn": {}, "gnn:support_sentence": {}, "gnn:support_paragraph": {}}
    for ckpt in sorted(Path(folder).glob("fold*.pt")):
        test = set(json.loads(Path(str(ckpt) + ".split.json").read_text())["test"])
        questions = [q for q in gs.questions if q.graph in test]
        res = evaluate_policy(make_policy("gnn", checkpoint=str(ckpt)), gs, Budget(), questions, progress=False)
        for key, metric in (
            ("gnn", "evidence_recall"),
            ("gnn:support_sentence", "support_sentence_recall"),
            ("gnn:support_paragraph", "support_paragraph_recall"),
        ):
            for r in res.rows:
                if r["metrics"][metric] is not None:
                    table[key][r["qid"]] = r["metrics"][metric]
        print(ckpt.name, res.overall["evidence_recall"], flush=True)
    Path(out).write_text(json.dumps(table))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(*sys.argv[1:4])
