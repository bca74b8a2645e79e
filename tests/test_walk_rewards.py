"""Rewards without evidence labels (rl/walk/rewards.py): the answer reward by hand, the LLM judge with
mock replies, token costs, and a run from the answer reward that cannot have read an evidence label."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.policies.walk import walk
from rl.walk.data import walk_data
from rl.walk.rewards import answer_tokens, costs, judge_reward, node_offer
from rl.walk.trainer import TrainConfig, WalkTrainer
from tests.test_walk_trainer import BUDGET, bridge_set, config


def answered_bridges(seeds):
    """Bridge tasks whose gold node alone holds the answer's words (``zq<task>`` and ``zr<task>``)."""
    graphs, questions, emb = bridge_set(seeds)
    out = []
    for i, q in enumerate(questions):
        g = graphs[q.graph]
        gold = q.evidence[0]
        g.revise_node(gold, text=g.texts[g.index_of(gold)] + f" zq{i} zr{i}")
        out.append(dataclasses.replace(q, answer=f"The zq{i}, zr{i}!"))
    return graphs, out, emb


def test_answer_tokens_and_what_a_node_offers():
    assert answer_tokens("The 7 May, 2023 and the 2023 trip") == ["7", "may", "2023", "trip"]
    graphs, questions, _ = answered_bridges((0,))
    g = next(iter(graphs.values()))
    g.metadata[0] = {"date_time": "8 May 2023", "speaker": "x"}
    assert node_offer(g, 0) == f"[8 May 2023] {g.texts[0]}"


def test_answer_reward_is_the_increment_of_answer_containment():
    graphs, questions, emb = answered_bridges((0,))
    g = graphs[questions[0].graph]
    d = walk_data(graphs, questions[:1], emb[:1], BUDGET, reward="answer")
    assert (d.gold < 0).all()  # no evidence row is read
    ep = walk(d.tables, TopRows([]), d.q, d.entries, BUDGET, lexical=d.lexical)
    first, second, third = ep.loaded[0].tolist()
    g.revise_node(g.node_ids[first], text="one zq0 word")  # half of the answer, then all of it, then nothing new
    g.revise_node(g.node_ids[second], text="zr0 and zq0")
    g.revise_node(g.node_ids[third], text="zq0 again")
    for v in range(g.num_nodes):
        if v not in (first, second, third) and "zq0" in g.texts[v]:
            g.revise_node(g.node_ids[v], text="moved")
    d = walk_data(graphs, questions[:1], emb[:1], BUDGET, reward="answer")
    assert d.answers.rewards(ep, torch.tensor([0]))[:, 0].tolist() == [0.5, 0.5, 0.0]


class TopRows:
    """A scorer that prefers the nodes of ``order`` (earlier first), the entries' children included."""

    def __init__(self, order):
        self.order = order

    def prepare(self, tables, q, entries, lexical=None):
        return None

    def score(self, ctx, cand):
        s = torch.zeros(cand.child.shape)
        for k, v in enumerate(self.order):
            s = torch.where(cand.child == v, torch.full_like(s, 10.0 - k), s)
        return s

    def stop_logit(self, ctx, best, count, budget):
        return None


def test_token_cost_charges_each_load():
    graphs, questions, emb = answered_bridges((0,))
    d = walk_data(graphs, questions[:2], emb[:2], BUDGET)
    ep = walk(d.tables, TopRows([]), d.q, d.entries, BUDGET, lexical=d.lexical)
    c = costs(ep, d.tables, node_cost=0.5, token_cost=0.01)
    tokens = d.tables.tokens[ep.loaded.clamp(min=0)].float().T
    assert torch.allclose(c, (0.5 + 0.01 * tokens) * (ep.loaded.T >= 0))


def test_judge_reward_scores_the_last_step_and_counts_failures(monkeypatch):
    import litellm

    real = litellm.completion
    seen = []

    def reply(**kwargs):
        text = kwargs["messages"][1]["content"]
        seen.append(text)
        return real(**{**kwargs, "mock_response": json.dumps({"score": 1.0 if "zq0" in text else 0.25})})

    monkeypatch.setattr(litellm, "completion", reply)
    graphs, questions, emb = answered_bridges((0,))
    d = walk_data(graphs, questions[:2], emb[:2], BUDGET, reward="judge")
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=0))
    judge = judge_reward(client, graphs, d.names, [questions[i] for i in d.kept])
    gold0 = graphs[questions[0].graph].index_of(questions[0].evidence[0])
    ep = walk(d.tables, TopRows([gold0]), d.q, d.entries, BUDGET, lexical=d.lexical)
    r = judge.rewards(ep, torch.tensor([0, 1]))
    last = ep.acted.long().sum(0) - 1
    assert r[last[0], 0] == 1.0 and r[last[1], 1] == 0.25  # walk 0 loaded the node with the answer
    assert float(r.sum()) == 1.25
    assert all("The zq" in s for s in seen) and len(seen) == 2  # the reference answer is shown
    judge.rewards(ep, torch.tensor([0, 1]))
    assert len(seen) == 2  # judged walks are not asked again


def test_training_from_the_answer_reward_reads_no_evidence_label():
    def run(strip: bool):
        graphs, questions, emb = answered_bridges((0, 1))
        vg, vq, vemb = answered_bridges((7,))
        if strip:
            questions = [dataclasses.replace(q, evidence=()) for q in questions]
            vq = [dataclasses.replace(q, evidence=()) for q in vq]
        cfg = config(objective={"imitation_epochs": 0, "rl_epochs": 6, "temperature": 1.0, "reward": "answer"})
        return WalkTrainer(cfg, {**graphs, **vg}, questions, emb, vq, vemb, budget=BUDGET).learn()

    with_labels, without = run(False), run(True)
    for (name, x), y in zip(with_labels.scorer.state_dict().items(), without.scorer.state_dict().values()):
        assert torch.equal(x, y), name
    assert [r["val_return"] for r in with_labels.history] == [r["val_return"] for r in without.history]
    assert without.best_score >= 0.9  # the answer is found behind the bridge of an unseen graph


def test_rewards_without_labels_refuse_imitation_and_the_mdp():
    with pytest.raises(ValueError, match="imitation_epochs=0"):
        TrainConfig.from_mapping({"objective": {"reward": "answer"}})
    with pytest.raises(ValueError, match="reward"):
        TrainConfig.from_mapping({"objective": {"reward": "gold"}})
    with pytest.raises(ValueError, match="judge"):
        TrainConfig.from_mapping({"objective": {"reward": "judge", "imitation_epochs": 0, "judge": {"modle": "x"}}})
