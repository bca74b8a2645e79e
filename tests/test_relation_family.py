"""The relation family: seeded, the relation (not cosine) names the gold neighbour, gold stays off the graph;
the scorer without query modulation; a tiny end-to-end run of scripts/studies/relation_family/run.py."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from graphmem.core.tokens import node_tokens
from graphmem.policies.walk import walk_tables
from models.edge_encoder import pair_table
from models.walk_scorer import WalkScorer
from tests import script_runner
from tests.script_loader import load_study

families = load_study("relation_family", "synthetic_relations")
KINDS, make_relation_family = families.KINDS, families.make_relation_family

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["typed", "untyped"])
def family(request):
    if request.param == "typed":
        return make_relation_family(num_graphs=12, seed=3)
    return make_relation_family(num_graphs=12, seed=3, typed=False, link_strength=2.0)


def test_untyped_family_hides_the_relation_from_labels_and_phase1_scores():
    typed = make_relation_family(num_graphs=2, seed=1)
    same = make_relation_family(num_graphs=2, seed=1, typed=True, link_strength=0.0)
    assert torch.equal(typed.query_embeddings, same.query_embeddings)  # the defaults draw what they always drew
    untyped = make_relation_family(num_graphs=2, seed=1, typed=False, link_strength=2.0)
    for g in untyped.graphs.values():
        assert set(g.edge_type.tolist()) == {g.relations.index("semantic")}
        assert float(g.edge_attr_init[:, 2:].abs().sum()) == 0.0  # no causal or entity score
    for g in typed.graphs.values():
        assert len(set(g.edge_type.tolist())) == 4 and float(g.edge_attr_init[:, 2:].sum()) > 0

    def block_agreement(fam):  # share of linked pairs whose largest block of x_i ⊙ x_j is their relation's
        hits = []
        for name, g in fam.graphs.items():
            for r, relation in enumerate(g.relations):
                for a, b in fam.links[name][relation]:
                    hits.append(int((g.embeddings[a] * g.embeddings[b]).view(4, -1).sum(1).argmax()) == r)
        return np.mean(hits)

    assert block_agreement(untyped) > 0.7 and block_agreement(typed) < 0.45  # the contents say the relation
    with pytest.raises(ValueError, match="multiple of 4"):
        make_relation_family(num_graphs=1, dim=30, link_strength=1.0)


def test_family_is_seeded():
    a, b = make_relation_family(num_graphs=3, seed=5), make_relation_family(num_graphs=3, seed=5)
    c = make_relation_family(num_graphs=3, seed=6)
    assert a.questions == b.questions and torch.equal(a.query_embeddings, b.query_embeddings)
    for name, g in a.graphs.items():
        h = b.graphs[name]
        assert g.texts == h.texts and torch.equal(g.embeddings, h.embeddings)
        assert torch.equal(g.edge_index, h.edge_index) and torch.equal(g.edge_attr_init, h.edge_attr_init)
    assert not torch.equal(a.query_embeddings, c.query_embeddings)
    assert [q.evidence for q in a.questions] != [q.evidence for q in c.questions]


def anchor_and_neighbours(family, name, query_embedding):
    """The node of highest cosine (what the embedding entry selector takes) and its out-edges ``(dst, relation)``
    with the edge's relation: its label, or in an untyped graph the generator's record of the pair."""
    graph = family.graphs[name]
    anchor = int((graph.embeddings @ query_embedding).argmax())
    out = graph.edge_index[0] == anchor
    dst = graph.edge_index[1][out].tolist()
    if graph.info["typed"]:
        return anchor, [(v, graph.relations[r]) for v, r in zip(dst, graph.edge_type[out].tolist())]
    relation = {frozenset(p): r for r, pairs in family.links[name].items() for p in pairs}
    return anchor, [(v, relation[frozenset((anchor, v))]) for v in dst]


def test_the_relation_and_its_direction_name_exactly_one_neighbour(family):
    kinds = set()
    for q, emb in zip(family.questions, family.query_embeddings):
        g = family.graphs[q.graph]
        relation, direction, wording = KINDS[q.category]
        anchor, nbrs = anchor_and_neighbours(family, q.graph, emb)
        assert q.text.startswith(wording) and g.keys[anchor] in q.text  # the query names its anchor and its intent
        t = g.timestamps
        fits = [
            v for v, r in nbrs if r == relation and (direction == 0 or np.sign(float(t[v] - t[anchor])) == direction)
        ]
        assert fits == [g.index_of(q.evidence[0])], (q.qid, fits)
        assert len(nbrs) >= 4  # the other relations' neighbours are there as distractors
        kinds.add(q.category)
    assert kinds == set(KINDS)


def test_cosine_does_not_tell_the_gold_neighbour_from_the_others(family):
    gold, other = [], []
    for q, emb in zip(family.questions, family.query_embeddings):
        g = family.graphs[q.graph]
        _, nbrs = anchor_and_neighbours(family, q.graph, emb)
        target = g.index_of(q.evidence[0])
        cos = g.embeddings @ emb
        gold += [float(cos[v]) for v, _ in nbrs if v == target]
        other += [float(cos[v]) for v, _ in nbrs if v != target]
    assert len(gold) == len(family.questions) and len(other) > 3 * len(gold)
    assert abs(np.mean(gold) - np.mean(other)) < 0.02
    assert stats.ks_2samp(gold, other).pvalue > 0.05  # one distribution


def test_the_query_embedding_carries_its_intent(family):
    kinds = list(KINDS)
    sims = family.query_embeddings @ family.intents.T  # [Q, kinds]
    own = torch.tensor([kinds.index(q.category) for q in family.questions])
    assert (sims.argmax(1) == own).float().mean() > 0.75  # chance: 1/6


def test_gold_is_kept_off_the_graph(family):
    gold_ids = {e for q in family.questions for e in q.evidence}
    for name, g in family.graphs.items():
        blob = json.dumps({"info": g.info, "metadata": g.metadata})
        assert "#" not in blob and not any(e in blob for e in gold_ids if e.startswith(name))
        assert set().union(*(m.keys() for m in g.metadata)) == {"session", "position", "speaker"}
        assert float(g.S.abs().sum() + g.F.abs().sum()) == 0.0  # no evidence counters set from the questions
    for q in family.questions:  # the question names the anchor, never the gold node's text
        assert family.graphs[q.graph].keys[family.graphs[q.graph].index_of(q.evidence[0])] not in q.text


def test_scorer_without_modulation_weighs_edges_by_the_intent_alone(family):
    g = next(iter(family.graphs.values()))
    tables = walk_tables(torch.nn.functional.normalize(g.embeddings, dim=1), node_tokens(g), pair_table(g))
    q, entries = family.query_embeddings[:4], torch.zeros(4, 1, dtype=torch.long)
    uniform = WalkScorer(dim=g.dim, intent="uniform", modulation=False, lexical=False)
    assert uniform.modulator is None
    assert torch.equal(uniform.prepare(tables, q, entries).m, torch.ones(4, 4))  # no query reaches the edges
    head = WalkScorer(dim=g.dim, modulation=False, lexical=False)
    torch.nn.init.normal_(head.intent.head.weight, generator=torch.Generator().manual_seed(0))
    m = head.prepare(tables, q, entries).m
    assert torch.allclose(m, 4 * head.intent(torch.nn.functional.normalize(q, dim=1)))
    assert not torch.allclose(m[0], m[1])


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}


def test_script_end_to_end_on_a_tiny_family(tmp_path):
    out = tmp_path / "rf.json"
    cmd = [
        sys.executable,
        "scripts/studies/relation_family/run.py",
        "seeds=[0,1]",
        "family.num_graphs=6",
        "family.events=8",
        "family.questions_per_graph=4",
        "trainer.objective.imitation_epochs=2",
        "trainer.objective.rl_epochs=1",
        "trainer.optim.batch_size=8",
        "heuristics=[beta_bfs,dense_topk]",
        *(f"~variants.{v}" for v in ("no_learned_edges", "neither", "intent_head_only")),
        "n_boot=100",
        f"out={out}",
    ]
    proc = script_runner.run(cmd, cwd=ROOT, env=env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert (
        res["command"].startswith("python scripts/studies/relation_family/run.py") and "seeds=[0,1]" in res["command"]
    )
    policies = ["full", "no_intent", "no_query_weighting", "cosine_walk", "beta_bfs", "dense_topk"]
    assert list(res["variants"]) == policies[:3]
    assert list(res["questions"]) == policies
    test_n = sum(s["test_questions"] for s in res["splits"])
    assert all(n == test_n for n in res["questions"].values()) and test_n > 0
    assert [s["seed"] for s in res["splits"]] == [0, 1]
    for name in policies:
        per_seed = res["per_seed"][name]
        assert len(per_seed) == 2 and all(0 <= v <= 1 for v in per_seed)
        assert res["summary"][name]["mean"] == pytest.approx(np.mean(per_seed))
        assert res["summary"][name]["std"] == pytest.approx(np.std(per_seed, ddof=1))
    paired = {c["reference"]: c for c in res["paired"]}
    assert set(paired) == set(policies) - {"full"} and all(c["policy"] == "full" for c in paired.values())
    assert all(c["n"] == test_n and c["ci_low"] <= c["mean_diff"] <= c["ci_high"] for c in paired.values())
    assert {r["variant"] for r in res["records"]} == set(res["variants"])
    assert [r["seed"] for r in res["intent_readout"]] == [0, 1]
    assert all(
        0 <= r["relation_accuracy"] <= 1 and r["kind_accuracy"] <= r["relation_accuracy"] for r in res["intent_readout"]
    )


@pytest.mark.parametrize(
    "override, message",
    [
        ("family.events=7", "events must be an even number"),
        ("seeds=[]", "seeds must be"),
        ("heuristics=[nope]", "nope"),
    ],
)
def test_script_refuses_bad_settings_in_one_line(tmp_path, override, message):
    proc = script_runner.run(
        [sys.executable, "scripts/studies/relation_family/run.py", override, f"out={tmp_path / 'x.json'}"],
        cwd=ROOT,
        env=env(),
        timeout=60,
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()
