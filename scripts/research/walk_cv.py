"""Research loop: train the walk scorer per LoCoMo fold (SL warm start, then REINFORCE), select on
validation, report test recall next to dense top-k (research script, not the final trainer).

    python scripts/research/walk_cv.py --graphset /work/main/outputs/graphs/locomo --sl 10 --rl 10
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from graphmem.graph_batch import GraphBatch
from graphmem.graphset import GraphSet
from graphmem.policies.base import Budget
from graphmem.policies.entries import EmbeddingEntrySelector, unit_embeddings
from models.edge_encoder import pair_table
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.objectives import MovingBaseline, bridge_rows, imitation_loss, recall_of, reinforce_loss, walk_rewards
from rl.splits import conversation_folds
from rl.walk import walk, walk_tables


def part(gs: GraphSet, names, budget: Budget, with_cat5: bool):
    """Union tables of the graphs ``names`` and the questions asked over them (rows of the union)."""
    names = sorted(names)
    batch = GraphBatch.from_graphs([gs.graphs[n] for n in names])
    union = batch.graph
    tables = walk_tables(unit_embeddings(union), union.node_tokens(), pair_table(union))
    selector = EmbeddingEntrySelector()
    queries = gs.queries()
    q, ent, gold, cat, dense = [], [], [], [], []
    for c, name in enumerate(names):
        graph, off = gs.graphs[name], int(batch.node_ptr[c])
        idx = [i for i, x in enumerate(gs.questions) if x.graph == name and (with_cat5 or x.category != 5)]
        picked = selector.select(graph, [queries[i] for i in idx], budget)
        cosines = None
        for i, e in zip(idx, picked):
            g = [graph.index_of(x) for x in dict.fromkeys(gs.questions[i].evidence) if graph.has_node(x)]
            if not g or not e:
                continue
            q.append(queries[i].embedding.float())
            ent.append([v + off for v in e])
            gold.append([v + off for v in g])
            cat.append(gs.questions[i].category)
            if cosines is None:
                cosines = unit_embeddings(graph)
            top = torch.topk(cosines @ torch.nn.functional.normalize(queries[i].embedding.float(), dim=0), 12).indices
            dense.append(len(set(top.tolist()) & set(g)) / len(g))

    def pad(rows):
        w = max(len(r) for r in rows)
        return torch.tensor([r + [-1] * (w - len(r)) for r in rows], dtype=torch.long)

    return {
        "tables": tables,
        "q": torch.stack(q),
        "entries": pad(ent),
        "gold": pad(gold),
        "category": cat,
        "dense": np.array(dense),
    }


@torch.no_grad()
def evaluate(scorer, data, budget, chunk=512):
    scorer.eval()
    out = []
    for lo in range(0, len(data["q"]), chunk):
        sl = slice(lo, lo + chunk)
        ep = walk(data["tables"], scorer, data["q"][sl], data["entries"][sl], budget)
        out.append(recall_of(ep, data["gold"][sl]))
    scorer.train()
    return torch.cat(out).numpy()


def train_fold(gs, split, budget, args):
    train = part(gs, split.train, budget, with_cat5=True)
    val = part(gs, split.val, budget, with_cat5=False)
    test = part(gs, split.test, budget, with_cat5=False)
    torch.manual_seed(args.seed)
    scorer = WalkScorer(ScorerConfig(rank=args.rank, edge_mode=args.edge_mode, intent=args.intent, stop=args.stop))
    opt = torch.optim.Adam(scorer.parameters(), lr=args.lr, weight_decay=args.wd)
    gen = torch.Generator().manual_seed(args.seed)
    bridges = bridge_rows(train["tables"], train["gold"])
    baseline = MovingBaseline(args.beta)
    n = len(train["q"])
    best = (-1.0, None, -1)
    history = []
    init_val = float(evaluate(scorer, val, budget).mean())
    history.append({"epoch": -1, "val": init_val})
    for epoch in range(args.sl + args.rl):
        phase = "sl" if epoch < args.sl else "rl"
        perm = torch.randperm(n, generator=gen)
        t0, losses, rets = time.perf_counter(), [], []
        for lo in range(0, n, args.batch):
            rows = perm[lo : lo + args.batch]
            q, ent, gold = train["q"][rows], train["entries"][rows], train["gold"][rows]
            ctx = scorer.prepare(train["tables"], q)
            ep = walk(
                train["tables"], scorer, q, ent, budget, sample=True, temperature=args.tau, generator=gen, ctx=ctx
            )
            if phase == "sl":
                loss, _ = imitation_loss(scorer, ctx, ep, gold, bridges[rows], budget, args.tau)
                rets.append(float(recall_of(ep, gold).mean()))
            else:
                rewards = walk_rewards(ep, gold, args.node_cost)
                loss, stats = reinforce_loss(scorer, ctx, ep, rewards, baseline, budget, args.tau, args.gamma, args.ent)
                rets.append(stats["return"])
            anchor = scorer.anchor_loss(ctx, ep.pool_pair[ep.pool_pair >= 0])
            loss = loss + args.anchor * anchor
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(scorer.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
        v = float(evaluate(scorer, val, budget).mean())
        history.append(
            {"epoch": epoch, "phase": phase, "loss": np.mean(losses), "train_return": np.mean(rets), "val": v}
        )
        print(
            f"  fold {split.fold} ep {epoch} {phase} loss {np.mean(losses):.4f} ret {np.mean(rets):.3f} "
            f"val {v:.3f} ({time.perf_counter() - t0:.1f}s)",
            flush=True,
        )
        if v > best[0]:
            best = (v, {k: t.clone() for k, t in scorer.state_dict().items()}, epoch)
    scorer.load_state_dict(best[1])
    rec = evaluate(scorer, test, budget)
    return {
        "fold": split.fold,
        "best_epoch": best[2],
        "val": best[0],
        "val_init": init_val,
        "val_dense": float(val["dense"].mean()),
        "test": float(rec.mean()),
        "dense": float(test["dense"].mean()),
        "n": len(rec),
        "diff": rec - test["dense"],
        "history": history,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphset", default="/work/main/outputs/graphs/locomo")
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--sl", type=int, default=10)
    ap.add_argument("--rl", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--tau", type=float, default=0.1)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--edge_mode", default="inductive")
    ap.add_argument("--intent", default="head")
    ap.add_argument("--stop", type=int, default=0)
    ap.add_argument("--anchor", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.9)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--ent", type=float, default=0.0)
    ap.add_argument("--node_cost", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gs = GraphSet.load(args.graphset)
    budget = Budget()
    splits = conversation_folds(list(gs.graphs), k=5, seed=0, val_fraction=0.2)
    results = []
    for k in [int(f) for f in args.folds.split(",")]:
        r = train_fold(gs, splits[k], budget, args)
        d = r["diff"]
        print(
            f"fold {k}: test {r['test']:.3f} dense {r['dense']:.3f} diff {d.mean():+.3f} (n={r['n']}) "
            f"best ep {r['best_epoch']} val {r['val']:.3f} (init {r['val_init']:.3f}, dense {r['val_dense']:.3f})",
            flush=True,
        )
        results.append(r)
    t = [r["test"] for r in results]
    dn = [r["dense"] for r in results]
    print(
        f"mean test {np.mean(t):.3f} ± {np.std(t, ddof=1) if len(t) > 1 else 0:.3f}  dense {np.mean(dn):.3f}  "
        f"diff {np.mean(t) - np.mean(dn):+.3f}"
    )
    if args.out:
        for r in results:
            r["diff"] = r["diff"].tolist()
        json.dump({"args": vars(args), "results": results}, open(args.out, "w"), indent=1, default=float)


if __name__ == "__main__":
    main()
