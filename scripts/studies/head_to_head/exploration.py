"""Exploration in the Beta walk: posterior-mean, UCB and Thompson-sampling rankings on one feedback stream.

GraphMemory's Beta BFS ranks neighbors by the posterior mean, which does not reward uncertainty,
and its evidence depends on the policy: only traversed edges are ever labelled (GraphMemory §5).
This module measures whether exploring while feedback is collected helps. Every learner is a
:class:`~graphmem.policies.beta_bfs.BetaBFS` with its own ``ranking`` (``mean``, ``ucb``,
``thompson`` with a seed), on its own copy of the graphs with every counter at ``S = F = 0``,
and all learners see the **same stream**: the same questions in the same order, split into
``rounds`` consecutive chunks, labelled by the same oracle Reflector (:mod:`feedback`).
For each round ``r = 1..R``:

1. **serve** each question of chunk ``r`` with the learner's own ranking, label the traversed
   transitions from that retrieval and update the counters (eq. 21), one question after another
   (:func:`~feedback.learn_evidence`); the evidence recall of these served retrievals
   is the online view (what users received while the graph learned; its shortfall is the regret);
2. **hold out**: after the chunk, Beta BFS with the posterior mean (``ranking=mean``, the
   evaluation ranking for every learner) retrieves the held-out questions on the learner's
   counters (round 0: before any feedback, the same for all).

Gold is read only after each retrieval has returned (by the oracle and by the metrics).
:func:`paired_rounds` states each learner against ``mean`` question by question, per round and
over all rounds (:func:`graphmem.eval.stats.compare_policies`); several Thompson seeds are also
averaged per question (``thompson``), one paired comparison over the same questions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from feedback import EvidenceStats, OracleConfig, learn_evidence
from torch import Tensor

from graphmem.core import Budget
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.harness import evaluate_policy
from graphmem.eval.metrics import in_overall, question_metrics
from graphmem.eval.stats import bootstrap_ci, compare_policies
from graphmem.policies import make_policy
from graphmem.policies.beta_bfs import RANKINGS, BetaBFS
from graphmem.policies.selectors import SelectorSpec
from graphmem.store.graphset import GraphSet
from graphmem.store.io import atomic_write

REFERENCE = "mean"
METRIC = "evidence_recall"
Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Learner:
    """One ranking of the comparison: its name in the results, ``ranking``, Thompson ``seed`` and UCB ``c``."""

    name: str
    ranking: str
    seed: int = 0
    ucb_c: float = 1.0


def make_learners(
    rankings: Sequence[str], thompson_seeds: Sequence[int], ucb_c: Sequence[float] = (1.0,)
) -> list[Learner]:
    """``mean`` first (the reference), then the other rankings; ``thompson`` once per seed
    (``thompson_s<seed>``; plain ``thompson`` for a single seed), ``ucb`` once per ``c``
    (``ucb_c<c>``; plain ``ucb`` for a single ``c``)."""
    unknown = [r for r in rankings if r not in RANKINGS]
    if unknown or REFERENCE not in rankings:
        raise ValueError(f"exploration.rankings must include {REFERENCE!r} and only {RANKINGS}, got {list(rankings)}")
    if "thompson" in rankings and not thompson_seeds:
        raise ValueError("exploration.thompson_seeds is empty; ranking thompson needs at least one seed")
    if "ucb" in rankings and (not ucb_c or any(not c >= 0 for c in ucb_c)):
        raise ValueError(f"exploration.ucb_c must list c >= 0 for ranking ucb, got {list(ucb_c)}")
    out = [Learner(REFERENCE, REFERENCE)]
    for r in dict.fromkeys(rankings):
        if r == "thompson":
            seeds = list(dict.fromkeys(int(s) for s in thompson_seeds))
            out += [Learner("thompson" if len(seeds) == 1 else f"thompson_s{s}", r, s) for s in seeds]
        elif r == "ucb":
            cs = list(dict.fromkeys(float(c) for c in ucb_c))
            out += [Learner("ucb" if len(cs) == 1 else f"ucb_c{c:g}", r, ucb_c=c) for c in cs]
    return out


def round_bounds(n: int, rounds: int) -> list[int]:
    """``R + 1`` boundaries splitting ``n`` stream questions into ``rounds`` consecutive chunks."""
    if rounds < 1:
        raise ValueError(f"exploration.rounds must be >= 1, got {rounds}")
    return [round(i * n / rounds) for i in range(rounds + 1)]


def served_rows(served: Sequence[tuple[Question, Any]], graphs: Mapping[str, MemoryGraph]) -> Rows:
    """Per-question metric rows of served retrievals (gold joined here, after retrieval)."""
    rows = []
    for q, r in served:
        graph = graphs[q.graph]
        loaded = r.loaded_ids(graph)
        m = question_metrics(q, graph, loaded, r.loaded_tokens, r.max_depth, r.wall_time_s)
        rows.append(
            {
                "qid": q.qid,
                "graph": q.graph,
                "category": q.category,
                "loaded": loaded,
                "metrics": {METRIC: m.evidence_recall},
            }
        )
    return rows


def heldout_rows(
    policy: BetaBFS, dataset: str, graphs: dict, questions: list[Question], embeddings: Tensor, budget: Budget
) -> Rows:
    """Per-question metric rows of ``policy`` on the held-out ``questions`` over ``graphs``."""
    view = GraphSet(dataset, graphs, questions, embeddings, None)
    result = evaluate_policy(policy, view, budget, progress=False)
    return [
        {k: row[k] for k in ("qid", "graph", "category", "loaded")} | {"metrics": {METRIC: row["metrics"][METRIC]}}
        for row in result.rows
    ]


def run_learner(
    learner: Learner,
    graphs: Mapping[str, MemoryGraph],
    stream: tuple[list[Question], Tensor],
    heldout: tuple[list[Question], Tensor],
    budget: Budget,
    rounds: int,
    dataset: str,
    entry_selector: SelectorSpec = "embedding",
    oracle: OracleConfig = OracleConfig(),
) -> dict[str, Any]:
    """One learner over the stream (module docstring): ``{"served": [rows of round r], "heldout":
    [rows after round r, r = 0..R], "evidence": totals, "seconds"}``. ``graphs`` are copied and
    their counters zeroed; the originals are never touched."""
    own = {n: g.copy() for n, g in graphs.items()}
    for g in own.values():
        g.S.zero_(), g.F.zero_(), g.invalidate()
    explore = make_policy(
        "beta_bfs", entry_selector=entry_selector, ranking=learner.ranking, ucb_c=learner.ucb_c, seed=learner.seed
    )
    evaluate = make_policy("beta_bfs", entry_selector=entry_selector)
    (sq, se), (hq, he) = stream, heldout
    bounds, stats, t0 = round_bounds(len(sq), rounds), EvidenceStats(), time.perf_counter()
    out: dict[str, Any] = {"served": [], "heldout": [heldout_rows(evaluate, dataset, own, hq, he, budget)]}
    for a, b in zip(bounds, bounds[1:]):
        served: list = []
        learn_evidence(own, sq[a:b], se[a:b], explore, budget, oracle, stats, served=served)
        out["served"].append(served_rows(served, own))
        out["heldout"].append(heldout_rows(evaluate, dataset, own, hq, he, budget))
    out["evidence"], out["seconds"] = stats.to_json(), round(time.perf_counter() - t0, 1)
    return out


def seed_average(runs: Sequence[Rows]) -> Rows:
    """Rows whose metric is the per-question mean over ``runs`` (the same questions in each)."""
    out = []
    for rows in zip(*runs):
        if len({r["qid"] for r in rows}) != 1:
            raise ValueError("seed_average: the runs do not hold the same questions in the same order")
        vals = [r["metrics"][METRIC] for r in rows]
        value = None if any(v is None for v in vals) else sum(vals) / len(vals)
        out.append({**rows[0], "metrics": {METRIC: value}})
    return out


def with_seed_average(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[Rows]]]:
    """``name -> {"served", "heldout"}`` rows of every learner, plus ``thompson`` averaged over
    the ``thompson_s<seed>`` learners when there are several."""
    rows = {name: {k: run[k] for k in ("served", "heldout")} for name, run in runs.items()}
    seeds = [n for n in runs if n.startswith("thompson_s")]
    if len(seeds) > 1:
        rows["thompson"] = {
            k: [seed_average(per_round) for per_round in zip(*(runs[n][k] for n in seeds))]
            for k in ("served", "heldout")
        }
    return rows


def summary(rows: Rows, n_boot: int = 10_000) -> dict[str, Any]:
    """Mean recall of ``rows`` (overall questions, recall defined) with its 95 % bootstrap CI and ``n``."""
    vals = [r["metrics"][METRIC] for r in rows if in_overall(r["category"]) and r["metrics"][METRIC] is not None]
    if not vals:
        return {"recall": None, "ci_low": None, "ci_high": None, "n": 0}
    lo, hi = bootstrap_ci(vals, n_boot) if len(vals) > 1 else (vals[0], vals[0])
    return {"recall": sum(vals) / len(vals), "ci_low": lo, "ci_high": hi, "n": len(vals)}


def paired_rounds(rows: Mapping[str, Mapping[str, list[Rows]]], n_boot: int = 10_000) -> dict[str, list[dict]]:
    """Each learner minus ``mean`` on evidence recall, per question: ``served`` per round (1..R)
    and over all rounds (``round: "all"``), ``heldout`` after each round (1..R)."""
    out: dict[str, list[dict]] = {"served": [], "heldout": []}
    ref = rows[REFERENCE]
    for name, mine in rows.items():
        if name == REFERENCE:
            continue
        for kind, first in (("served", 1), ("heldout", 0)):
            pairs = [(i + first, ref[kind][i], mine[kind][i]) for i in range(len(ref[kind]))]
            if kind == "served":
                pairs.append(("all", [r for rs in ref[kind] for r in rs], [r for rs in mine[kind] for r in rs]))
            for rnd, a, b in pairs:
                if rnd == 0:
                    continue
                for c in compare_policies({REFERENCE: a, name: b}, REFERENCE, [METRIC], n_boot=n_boot):
                    out[kind].append({"round": rnd, **c.to_json()})
    return out


def compare_rankings(
    graphs: Mapping[str, MemoryGraph],
    stream: tuple[list[Question], Tensor],
    heldout: tuple[list[Question], Tensor],
    budget: Budget,
    dataset: str,
    rankings: Sequence[str] = RANKINGS,
    rounds: int = 5,
    thompson_seeds: Sequence[int] = (0,),
    ucb_c: Sequence[float] = (1.0,),
    entry_selector: SelectorSpec = "embedding",
    oracle: OracleConfig = OracleConfig(),
    n_boot: int = 10_000,
    log=None,
) -> dict[str, Any]:
    """Every learner of :func:`make_learners` on the same stream; per learner and round the mean
    recall with its CI (``learners``), and the paired differences against ``mean`` (``paired``)."""
    runs, specs = {}, {}
    for learner in make_learners(rankings, thompson_seeds, ucb_c):
        specs[learner.name] = asdict(learner)
        runs[learner.name] = run_learner(
            learner, graphs, stream, heldout, budget, rounds, dataset, entry_selector, oracle
        )
        if log is not None:
            log(learner.name, runs[learner.name])
    rows = with_seed_average(runs)
    learners = {
        name: {
            **specs.get(name, {"name": name, "ranking": "thompson", "seeds": list(thompson_seeds)}),
            "served": [{"round": i + 1, **summary(r, n_boot)} for i, r in enumerate(rs["served"])],
            "served_all": summary([r for per in rs["served"] for r in per], n_boot),
            "heldout": [{"round": i, **summary(r, n_boot)} for i, r in enumerate(rs["heldout"])],
            **({"evidence": runs[name]["evidence"], "seconds": runs[name]["seconds"]} if name in runs else {}),
        }
        for name, rs in rows.items()
    }
    served = {name: [r for per in run["served"] for r in per] for name, run in runs.items()}
    for name in runs:  # how often the learner loaded other nodes than the mean learner
        differ = sum(a["loaded"] != b["loaded"] for a, b in zip(served[name], served[REFERENCE]))
        learners[name]["served_differ_from_mean"] = differ
        final = zip(runs[name]["heldout"][-1], runs[REFERENCE]["heldout"][-1])
        learners[name]["heldout_differ_from_mean"] = sum(a["loaded"] != b["loaded"] for a, b in final)
    bounds = round_bounds(len(stream[0]), rounds)
    return {
        "rounds": rounds,
        "round_sizes": [b - a for a, b in zip(bounds, bounds[1:])],
        "stream_questions": len(stream[0]),
        "heldout_questions": len(heldout[0]),
        "rankings": list(rankings),
        "thompson_seeds": [int(s) for s in thompson_seeds],
        "ucb_c": [float(c) for c in ucb_c],
        "learners": learners,
        "paired": paired_rounds(rows, n_boot),
    }


def plot_rounds(result: Mapping[str, Any], path) -> None:
    """Top: served recall per round and held-out recall after each round, one line per learner with
    its 95 % bootstrap band; bottom: each learner minus ``mean`` per question, with the paired 95 %
    bootstrap CI. The single Thompson seeds are left out when their average is shown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    learners = result["learners"]
    shown = [n for n in learners if not (n.startswith("thompson_s") and "thompson" in learners)]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), sharex="col")
    titles = {
        "served": f"served while learning ({result['stream_questions']} stream questions)",
        "heldout": f"held out, posterior mean ({result['heldout_questions']} questions)",
    }
    for col, kind in enumerate(("served", "heldout")):
        top, bottom = axes[0, col], axes[1, col]
        for i, name in enumerate(shown):
            colour = f"C{i}"
            pts = [p for p in learners[name][kind] if p["recall"] is not None]
            x = [p["round"] for p in pts]
            top.plot(x, [p["recall"] for p in pts], "o-", color=colour, label=name, ms=3)
            top.fill_between(x, [p["ci_low"] for p in pts], [p["ci_high"] for p in pts], color=colour, alpha=0.12)
            diffs = [c for c in result["paired"][kind] if c["policy"] == name and c["round"] != "all"]
            if diffs:
                x = [c["round"] for c in diffs]
                bottom.plot(x, [c["mean_diff"] for c in diffs], "o-", color=colour, label=f"{name} − mean", ms=3)
                lo, hi = [c["ci_low"] for c in diffs], [c["ci_high"] for c in diffs]
                bottom.fill_between(x, lo, hi, color=colour, alpha=0.12)
        top.set_title(titles[kind], fontsize=9)
        top.set_ylabel("evidence recall (95% band)")
        bottom.axhline(0.0, color="black", lw=0.6)
        bottom.set_ylabel("paired Δ recall vs mean (95% CI)")
        bottom.set_xlabel("feedback round")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
            ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
