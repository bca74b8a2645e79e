"""Research loop: train the walk scorer per LoCoMo fold (imitation warm start and/or REINFORCE on
walk episodes), select on validation, report test recall next to the baselines with paired tests.

    python scripts/research/baselines.py /work/main/outputs/graphs/locomo outputs/research/baselines_locomo.json
    python scripts/research/walk_cv.py --sl 8 --rl 8 --out outputs/research/run.json

Each phase keeps its best epoch on the validation conversations; REINFORCE starts from the best
imitation epoch (``--sl 0``: from the untrained, cosine-walking scorer). The test conversations
are walked once per phase, with the selected weights.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from graphmem.eval.metrics import question_metrics
from graphmem.graphset import GraphSet
from graphmem.policies.base import Budget
from graphmem.policies.walk import walk
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.common.splits import conversation_folds
from rl.walk.data import walk_data
from rl.walk.objectives import MovingBaseline, imitation_loss, recall_of, reinforce_loss, walk_rewards


def part(gs: GraphSet, names, budget: Budget, with_cat5: bool, extra: GraphSet | None = None) -> dict:
    """:class:`~rl.walk.data.WalkData` of the questions over graphs ``names`` (and every question of ``extra``)."""
    names = set(names)
    idx = [i for i, q in enumerate(gs.questions) if q.graph in names and (with_cat5 or q.category != 5)]
    questions, emb = [gs.questions[i] for i in idx], gs.query_embeddings[idx]
    graphs = dict(gs.graphs)
    if extra is not None:
        clash = set(extra.graphs) & set(graphs)
        if clash:
            raise ValueError(f"extra training graphs share names with the graph set: {sorted(clash)[:3]}")
        graphs.update(extra.graphs)
        questions = questions + list(extra.questions)
        emb = torch.cat([emb, extra.query_embeddings])
    data = walk_data(graphs, questions, emb, budget)
    by_qid = {q.qid: q for q in questions}
    return {"data": data, "questions": [by_qid[q] for q in data.qids], "graphs": graphs}


@torch.no_grad()
def loaded_rows(scorer, data, budget, chunk=512) -> Tensor:
    scorer.eval()
    out = [
        walk(data.tables, scorer, data.q[lo : lo + chunk], data.entries[lo : lo + chunk], budget).loaded
        for lo in range(0, len(data), chunk)
    ]
    scorer.train()
    return torch.cat(out)


def evaluate(scorer, p, budget) -> np.ndarray:
    """Per-question evidence recall of the greedy walk (rewards' definition)."""
    data = p["data"]
    hits = (loaded_rows(scorer, data, budget)[:, :, None] == data.gold[:, None, :]) & (data.gold[:, None, :] >= 0)
    return (hits.any(1).sum(1).float() / (data.gold >= 0).sum(1).float()).numpy()


def harness_metrics(scorer, p, budget) -> dict[str, list]:
    """Per-question metrics of the harness (graphmem.eval.metrics) for the greedy walk's loaded sets."""
    data, graphs = p["data"], p["graphs"]
    index = {n: c for c, n in enumerate(data.names)}
    out = {"evidence_recall": [], "support_sentence_recall": [], "support_paragraph_recall": []}
    for q, rows in zip(p["questions"], loaded_rows(scorer, data, budget)):
        graph = graphs[q.graph]
        ids = [graph.node_ids[v] for v in data.local_rows(rows, index[q.graph])]
        m = question_metrics(q, graph, ids, 0, 0, 0.0)
        for k in out:
            out[k].append(getattr(m, k))
    return out


def run_phase(phase, scorer, train, val, budget, args, gen, history, epochs, lr):
    """``epochs`` of one objective; returns the best-on-validation state and its score."""
    opt = torch.optim.Adam(scorer.parameters(), lr=lr, weight_decay=args.wd)
    train = train["data"]
    baseline = MovingBaseline(args.beta)
    n, tau = len(train), args.tau if phase == "sl" else args.rl_tau
    best = (float(evaluate(scorer, val, budget).mean()), {k: t.clone() for k, t in scorer.state_dict().items()}, -1)
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen)
        t0, losses, rets = time.perf_counter(), [], []
        for lo in range(0, n, args.batch):
            rows = perm[lo : lo + args.batch]
            q, ent, gold = train.q[rows], train.entries[rows], train.gold[rows]
            ctx = scorer.prepare(train.tables, q, ent)
            ep = walk(train.tables, scorer, q, ent, budget, sample=True, temperature=tau, generator=gen, ctx=ctx)
            if phase == "sl":
                loss, _ = imitation_loss(scorer, ctx, ep, gold, train.tables, budget, tau)
                rets.append(float(recall_of(ep, gold).mean()))
            else:
                rewards = walk_rewards(ep, gold, args.node_cost)
                loss, st = reinforce_loss(scorer, ctx, ep, rewards, baseline, budget, tau, args.gamma, args.ent)
                rets.append(st["return"])
            loss = loss + args.anchor * scorer.anchor_loss(ctx, ep.pool_pair[ep.pool_pair >= 0])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(scorer.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
        v = float(evaluate(scorer, val, budget).mean())
        history.append({"phase": phase, "epoch": epoch, "loss": np.mean(losses), "return": np.mean(rets), "val": v})
        print(
            f"    {phase} {epoch} loss {np.mean(losses):.4f} return {np.mean(rets):.3f} val {v:.3f} "
            f"({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
        if v > best[0] or (best[2] == -1 and phase == "rl" and args.rl_must_move):
            best = (v, {k: t.clone() for k, t in scorer.state_dict().items()}, epoch)
    scorer.load_state_dict(best[1])
    return best


def train_fold(gs, split, budget, args, extra=None) -> dict:
    locomo = gs.dataset == "locomo"
    train = part(gs, split.train, budget, with_cat5=True, extra=extra)
    val = part(gs, split.val, budget, with_cat5=not locomo)
    test = part(gs, split.test, budget, with_cat5=not locomo)
    print(
        f"  train {len(train['data'])} questions ({train['data'].dropped} dropped), val {len(val['data'])}, "
        f"test {len(test['data'])}",
        flush=True,
    )
    torch.manual_seed(args.seed)
    cfg = ScorerConfig(rank=args.rank, edge_mode=args.edge_mode, intent=args.intent, stop=bool(args.stop))
    scorer = WalkScorer(cfg)
    gen = torch.Generator().manual_seed(args.seed)
    history, out = (
        [],
        {"fold": split.fold, "qid": test["data"].qids, "val_init": float(evaluate(scorer, val, budget).mean())},
    )
    out["test_init"] = harness_metrics(scorer, test, budget)
    for phase, epochs, lr in (("sl", args.sl, args.lr), ("rl", args.rl, args.rl_lr)):
        if epochs:
            v, _, e = run_phase(phase, scorer, train, val, budget, args, gen, history, epochs, lr)
            out[phase] = {"val": v, "best_epoch": e, "test": harness_metrics(scorer, test, budget)}
    out["history"] = history
    return out


def paired(a: np.ndarray, b: np.ndarray, seed: int = 0, n_boot: int = 10000) -> dict:
    """Mean of ``a - b``, its 95% bootstrap CI and the Wilcoxon signed-rank p (two-sided)."""
    d = np.asarray(a) - np.asarray(b)
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, len(d), (n_boot, len(d)))].mean(1)
    p = stats.wilcoxon(d).pvalue if np.any(d != 0) else 1.0
    return {
        "diff": float(d.mean()),
        "ci": [float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))],
        "p": float(p),
        "n": int(len(d)),
    }


def report(results: list[dict], baselines: dict, metric: str) -> dict:
    """Per phase: mean ± std over folds of ``metric`` and paired tests against each baseline (pooled questions)."""
    summary = {}
    suffix = {
        "evidence_recall": "",
        "support_sentence_recall": ":support_sentence",
        "support_paragraph_recall": ":support_paragraph",
    }[metric]
    for key in ("init", "sl", "rl"):
        if not all(key == "init" or key in r for r in results):
            continue
        per_fold, pooled = [], {"ours": [], **{b: [] for b in baselines}}
        for r in results:
            values = (r["test_init"] if key == "init" else r[key]["test"])[metric]
            keep = [i for i, v in enumerate(values) if v is not None]
            qids = [r["qid"][i] for i in keep]
            rec = [values[i] for i in keep]
            f = {"fold": r["fold"], "ours": float(np.mean(rec)), "n": len(rec)}
            for b, table in baselines.items():
                tb = table[b + suffix]
                if not all(q in tb for q in qids):
                    continue
                base = [tb[q] for q in qids]
                f[b] = float(np.mean(base))
                pooled[b].extend(base)
            pooled["ours"].extend(rec)
            per_fold.append(f)
        folds = np.array([f["ours"] for f in per_fold])
        s = {
            "per_fold": per_fold,
            "mean": float(folds.mean()),
            "std": float(folds.std(ddof=1)) if len(folds) > 1 else 0.0,
        }
        print(f"[{key}] {metric}: mean {s['mean']:.3f} ± {s['std']:.3f}; folds " + " ".join(f"{x:.3f}" for x in folds))
        for b in baselines:
            if len(pooled[b]) != len(pooled["ours"]):
                continue
            fb = np.array([f[b] for f in per_fold])
            x = {
                "mean": float(fb.mean()),
                "std": float(fb.std(ddof=1)) if len(fb) > 1 else 0.0,
                "folds": fb.tolist(),
                "folds_above": int((folds > fb).sum()),
                **paired(pooled["ours"], pooled[b]),
            }
            s[b] = x
            print(
                f"    vs {b}: {x['mean']:.3f} ± {x['std']:.3f}, diff {x['diff']:+.3f} CI [{x['ci'][0]:+.3f}, "
                f"{x['ci'][1]:+.3f}] Wilcoxon p={x['p']:.2g} n={x['n']}, above on {x['folds_above']}/{len(folds)}; "
                "folds " + " ".join(f"{v:.3f}" for v in fb)
            )
        summary[key] = s
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphset", default="/work/main/outputs/graphs/locomo")
    ap.add_argument("--baselines", default="outputs/research/baselines_locomo.json")
    ap.add_argument("--gnn", default="", help="per-question GNN recalls (scripts/research/gnn_eval.py)")
    ap.add_argument("--extra_train", default="", help="a graph set whose questions join every fold's training part")
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--sl", type=int, default=8)
    ap.add_argument("--rl", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--rl_lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--tau", type=float, default=0.1)
    ap.add_argument("--rl_tau", type=float, default=0.1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--edge_mode", default="inductive")
    ap.add_argument("--intent", default="head")
    ap.add_argument("--stop", type=int, default=0)
    ap.add_argument("--anchor", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.9)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--ent", type=float, default=0.0)
    ap.add_argument("--node_cost", type=float, default=0.0)
    ap.add_argument("--rl_must_move", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gs = GraphSet.load(args.graphset)
    with open(args.baselines) as f:
        table = json.load(f)
    if args.gnn:
        with open(args.gnn) as f:
            table.update(json.load(f))
    names = ["dense_topk", "ppr"] + (["gnn"] if args.gnn else [])
    baselines = {b: table for b in names}
    extra = GraphSet.load(args.extra_train) if args.extra_train else None
    budget = Budget()
    splits = conversation_folds(list(gs.graphs), k=5, seed=0, val_fraction=0.2)
    results = []
    for k in [int(f) for f in args.folds.split(",")]:
        print(f"fold {k}", flush=True)
        results.append(train_fold(gs, splits[k], budget, args, extra))
    metrics = ["evidence_recall"] if gs.dataset == "locomo" else ["support_sentence_recall", "support_paragraph_recall"]
    summary = {m: report(results, baselines, m) for m in metrics}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "results": results}, f, default=float)


if __name__ == "__main__":
    main()
