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

from graphmem.graph_batch import GraphBatch
from graphmem.graphset import GraphSet
from graphmem.policies.base import Budget
from graphmem.policies.entries import EmbeddingEntrySelector, unit_embeddings
from models.edge_encoder import pair_table
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.objectives import MovingBaseline, bridge_rows, imitation_loss, recall_of, reinforce_loss, walk_rewards
from rl.splits import conversation_folds
from rl.walk import walk, walk_tables


def part(gs: GraphSet, names, budget: Budget, with_cat5: bool) -> dict:
    """Union tables of the graphs ``names`` and the questions asked over them (rows of the union)."""
    names = sorted(names)
    batch = GraphBatch.from_graphs([gs.graphs[n] for n in names])
    union = batch.graph
    tables = walk_tables(unit_embeddings(union), union.node_tokens(), pair_table(union))
    selector, queries = EmbeddingEntrySelector(), gs.queries()
    q, ent, gold, qid = [], [], [], []
    for c, name in enumerate(names):
        graph, off = gs.graphs[name], int(batch.node_ptr[c])
        idx = [i for i, x in enumerate(gs.questions) if x.graph == name and (with_cat5 or x.category != 5)]
        for i, e in zip(idx, selector.select(graph, [queries[i] for i in idx], budget)):
            g = [graph.index_of(x) for x in dict.fromkeys(gs.questions[i].evidence) if graph.has_node(x)]
            if g and e:
                q.append(queries[i].embedding.float())
                ent.append([v + off for v in e])
                gold.append([v + off for v in g])
                qid.append(gs.questions[i].qid)

    def pad(rows):
        w = max(len(r) for r in rows)
        return torch.tensor([r + [-1] * (w - len(r)) for r in rows], dtype=torch.long)

    return {"tables": tables, "q": torch.stack(q), "entries": pad(ent), "gold": pad(gold), "qid": qid}


@torch.no_grad()
def evaluate(scorer, data, budget, chunk=512) -> np.ndarray:
    scorer.eval()
    out = [
        recall_of(
            walk(data["tables"], scorer, data["q"][lo : lo + chunk], data["entries"][lo : lo + chunk], budget),
            data["gold"][lo : lo + chunk],
        )
        for lo in range(0, len(data["q"]), chunk)
    ]
    scorer.train()
    return torch.cat(out).numpy()


def run_phase(phase, scorer, train, val, budget, args, gen, history, epochs, lr):
    """``epochs`` of one objective; returns the best-on-validation state and its score."""
    opt = torch.optim.Adam(scorer.parameters(), lr=lr, weight_decay=args.wd)
    bridges = bridge_rows(train["tables"], train["gold"])
    baseline = MovingBaseline(args.beta)
    n, tau = len(train["q"]), args.tau if phase == "sl" else args.rl_tau
    best = (float(evaluate(scorer, val, budget).mean()), {k: t.clone() for k, t in scorer.state_dict().items()}, -1)
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen)
        t0, losses, rets = time.perf_counter(), [], []
        for lo in range(0, n, args.batch):
            rows = perm[lo : lo + args.batch]
            q, ent, gold = train["q"][rows], train["entries"][rows], train["gold"][rows]
            ctx = scorer.prepare(train["tables"], q, ent)
            ep = walk(train["tables"], scorer, q, ent, budget, sample=True, temperature=tau, generator=gen, ctx=ctx)
            if phase == "sl":
                loss, _ = imitation_loss(scorer, ctx, ep, gold, bridges[rows], budget, tau)
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


def train_fold(gs, split, budget, args) -> dict:
    train = part(gs, split.train, budget, with_cat5=True)
    val = part(gs, split.val, budget, with_cat5=False)
    test = part(gs, split.test, budget, with_cat5=False)
    torch.manual_seed(args.seed)
    cfg = ScorerConfig(rank=args.rank, edge_mode=args.edge_mode, intent=args.intent, stop=bool(args.stop))
    scorer = WalkScorer(cfg)
    gen = torch.Generator().manual_seed(args.seed)
    history, out = [], {"fold": split.fold, "qid": test["qid"], "val_init": float(evaluate(scorer, val, budget).mean())}
    out["test_init"] = evaluate(scorer, test, budget).tolist()
    for phase, epochs, lr in (("sl", args.sl, args.lr), ("rl", args.rl, args.rl_lr)):
        if epochs:
            v, _, e = run_phase(phase, scorer, train, val, budget, args, gen, history, epochs, lr)
            out[phase] = {"val": v, "best_epoch": e, "test": evaluate(scorer, test, budget).tolist()}
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


def report(results: list[dict], baselines: dict) -> dict:
    summary = {}
    for key in ("init", "sl", "rl"):
        rows = [(r, r["test_init"] if key == "init" else r[key]["test"]) for r in results if key == "init" or key in r]
        if len(rows) != len(results):
            continue
        per_fold, pooled = [], {"ours": [], **{b: [] for b in baselines}}
        for r, rec in rows:
            f = {"fold": r["fold"], "ours": float(np.mean(rec))}
            for b, table in baselines.items():
                base = np.array([table[q] for q in r["qid"]])
                f[b] = float(base.mean())
                pooled[b].extend(base.tolist())
            pooled["ours"].extend(rec)
            per_fold.append(f)
        folds = np.array([f["ours"] for f in per_fold])
        s = {
            "per_fold": per_fold,
            "mean": float(folds.mean()),
            "std": float(folds.std(ddof=1)) if len(folds) > 1 else 0.0,
        }
        for b in baselines:
            fb = np.array([f[b] for f in per_fold])
            s[b] = {
                "mean": float(fb.mean()),
                "std": float(fb.std(ddof=1)) if len(fb) > 1 else 0.0,
                "folds_above": int((folds > fb).sum()),
                **paired(pooled["ours"], pooled[b]),
            }
        summary[key] = s
        line = " ".join(f"{f['ours']:.3f}" for f in per_fold)
        print(f"[{key}] mean {s['mean']:.3f} ± {s['std']:.3f} folds: {line}")
        for b in baselines:
            x = s[b]
            print(
                f"    vs {b}: {x['mean']:.3f} ± {x['std']:.3f}, diff {x['diff']:+.3f} CI [{x['ci'][0]:+.3f}, "
                f"{x['ci'][1]:+.3f}] Wilcoxon p={x['p']:.2g} n={x['n']}, above on {x['folds_above']}/{len(folds)} folds"
            )
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphset", default="/work/main/outputs/graphs/locomo")
    ap.add_argument("--baselines", default="outputs/research/baselines_locomo.json")
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
    baselines = {b: table[b] for b in ("dense_topk", "ppr")}
    budget = Budget()
    splits = conversation_folds(list(gs.graphs), k=5, seed=0, val_fraction=0.2)
    results = []
    for k in [int(f) for f in args.folds.split(",")]:
        print(f"fold {k}", flush=True)
        results.append(train_fold(gs, splits[k], budget, args))
    summary = report(results, baselines)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "results": results}, f, default=float)


if __name__ == "__main__":
    main()
