"""Objectives on walk episodes (rl/walk/objectives.py): rewards and oracle positives by hand, and a toy
task that only a budget-aware walk can solve, learned by imitation and by REINFORCE alone."""

from __future__ import annotations

import pytest
import torch

from graphmem.builders.synthetic import make_bridge_graph
from graphmem.core import Budget
from graphmem.core.tokens import node_tokens
from graphmem.policies.walk import walk, walk_tables
from models.edge_encoder import pair_table
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.objectives import (
    HageMDP,
    MovingBaseline,
    discounted_returns,
    imitation_loss,
    oracle_positives,
    recall_of,
    reinforce_loss,
)
from rl.walk.rewards import costs, evidence_rewards
from tests.test_walk import TOY_BUDGET, VALUES, NodeValueScorer, tables_of, toy_graph

# one entry, two children per node, three nodes: a level-by-level walk fills the cap with the
# entry's two children at hop 1, so a gold node two hops away is out of its reach; a best-first
# walk reaches it by spending one node on the bridge
BRIDGE_BUDGET = Budget(max_entries=1, top_k_neighbors=2, max_hops=2, max_nodes=3)


def test_rewards_and_returns_by_hand():
    g = toy_graph()
    tables = tables_of(g)
    ep = walk(tables, NodeValueScorer(VALUES), torch.zeros(1, 2), torch.tensor([[0, 1]]), TOY_BUDGET)
    gold = torch.tensor([[5, 4, -1]])  # loaded order is 0, 2, 5, 4, 1
    r = evidence_rewards(ep, gold) - costs(ep, tables, node_cost=0.1, token_cost=0.0)
    assert torch.allclose(r[:, 0], torch.tensor([-0.1, -0.1, 0.4, 0.4, -0.1]))
    assert torch.allclose(recall_of(ep, gold), torch.tensor([1.0]))
    g_t = discounted_returns(r, ep.acted, gamma=0.5)
    assert torch.allclose(g_t[:, 0], torch.tensor([-0.00625, 0.1875, 0.575, 0.35, -0.1]))


def test_oracle_positives_by_hand():
    g = toy_graph()
    tables = tables_of(g)
    ep = walk(tables, NodeValueScorer(VALUES), torch.zeros(1, 2), torch.tensor([[0, 1]]), TOY_BUDGET)
    gold = torch.tensor([[5]])
    pos = oracle_positives(ep, gold, tables, TOY_BUDGET)
    node = ep.pool_node[0]
    # step 0: open are the entries 0, 1; no gold open; 0 is no bridge to 5 (2 is), so no positive
    assert pos[0, 0].sum() == 0
    # step 1: open 2, 3, 4 (children of 0) and entry 1: 2 leads to 5
    assert [int(node[p]) for p in pos[1, 0].nonzero().flatten()] == [2]
    # step 2: 5 is open: it is the only positive; afterwards 5 is loaded and nothing is supervised
    assert [int(node[p]) for p in pos[2, 0].nonzero().flatten()] == [5]
    assert pos[3:].sum() == 0


def bridge_part(seed: int):
    graph, queries, gold = make_bridge_graph(num_queries=8, seed=seed, dim=32)
    x = torch.nn.functional.normalize(graph.embeddings, dim=1)
    tables = walk_tables(x, node_tokens(graph), pair_table(graph))
    q = torch.stack([qq.embedding for qq in queries])
    entries = (torch.nn.functional.normalize(q, dim=1) @ x.T).argmax(1, keepdim=True)
    return tables, q, entries, torch.tensor(gold)[:, None]


def train_on_bridges(
    objective: str, seed: int = 0, steps: int = 40, budget: Budget = BRIDGE_BUDGET, node_cost: float = 0.0
):
    torch.manual_seed(seed)
    scorer = WalkScorer(ScorerConfig(dim=32, rank=0, stop=node_cost > 0, lexical=False))
    opt = torch.optim.Adam(scorer.parameters(), lr=2e-2)
    gen = torch.Generator().manual_seed(seed)
    tables, q, entries, gold = bridge_part(0)
    baseline = MovingBaseline(0.9)
    tau = 0.1 if objective == "imitation" else 1.0
    for _ in range(steps):
        ctx = scorer.prepare(tables, q, entries)
        ep = walk(tables, scorer, q, entries, budget, sample=True, temperature=tau, generator=gen, ctx=ctx)
        if objective == "imitation":
            loss, _ = imitation_loss(scorer, ctx, ep, gold, tables, budget, tau)
        else:
            rewards = evidence_rewards(ep, gold) - costs(ep, tables, node_cost, 0.0)
            loss, _ = reinforce_loss(scorer, ctx, ep, rewards, baseline, budget, tau)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return scorer


def unseen_recall(scorer) -> float:
    tables, q, entries, gold = bridge_part(1)  # another graph: other embeddings, rows and ids
    return float(recall_of(walk(tables, scorer, q, entries, BRIDGE_BUDGET), gold).mean())


def test_cosine_walk_never_reaches_the_gold():
    assert unseen_recall(WalkScorer(ScorerConfig(dim=32, rank=0, stop=False, lexical=False))) == 0.0


@pytest.mark.parametrize("objective", ["imitation", "reinforce"])
def test_walk_objective_learns_to_cross_the_bridge_on_an_unseen_graph(objective):
    assert unseen_recall(train_on_bridges(objective)) >= 0.9


def test_training_on_walk_episodes_is_deterministic():
    a, b = train_on_bridges("reinforce", steps=8), train_on_bridges("reinforce", steps=8)
    for (name, p), (_, r) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, r), name


def test_learned_stop_spends_only_what_the_node_cost_repays():
    # six nodes allowed; the gold is the third. With a cost per node the walk learns to stop after it.
    budget = Budget(max_entries=1, top_k_neighbors=2, max_hops=2, max_nodes=6)
    tables, q, entries, gold = bridge_part(1)
    for cost, nodes in ((0.0, 6), (0.1, 3)):
        scorer = train_on_bridges("reinforce", steps=60, budget=budget, node_cost=cost)
        ep = walk(tables, scorer, q, entries, budget)
        assert float(recall_of(ep, gold).mean()) >= 0.9
        assert float(ep.count.float().mean()) == nodes, cost


def test_hage_mdp_rewards_by_hand():
    g = toy_graph()
    tables = tables_of(g)
    mdp = HageMDP()
    row, start, blocked, _ = mdp.episodes(torch.tensor([[0, 1]]), torch.tensor([[5, 3]]))
    assert row.tolist() == [0, 0] and start.tolist() == [[0], [1]] and blocked.tolist() == [[-1, 1], [0, -1]]
    first = (start[:1], blocked[:1])
    ep = walk(tables, NodeValueScorer(VALUES), torch.zeros(1, 2), first[0], mdp.budget(), blocked=first[1])
    assert ep.loaded[0].tolist() == [0, 2, 5, 4, 3, -1]  # the entry 1 is visited: never a step; then a dead end
    visited = torch.cat(first, 1)
    rewards, live = mdp.rewards(ep, torch.tensor([[5, 3]]), visited)
    assert torch.allclose(rewards[:, 0], torch.tensor([0, -0.05, 9.95, -0.05, 9.95, 0]))
    assert live[:, 0].tolist() == [False, True, True, True, True, False]
    rewards, live = mdp.rewards(ep, torch.tensor([[5, 1]]), visited)  # 1 counts as reached from the start
    assert live[:, 0].tolist() == [False, True, True, False, False, False]
    short = HageMDP(max_hops=2)
    ep = walk(tables, NodeValueScorer(VALUES), torch.zeros(1, 2), first[0], short.budget(), blocked=first[1])
    rewards, live = short.rewards(ep, torch.tensor([[3]]), visited)
    assert torch.allclose(rewards[:, 0], torch.tensor([0, -0.05, -1.05]))  # timeout at H_max


def test_hage_mdp_objective_learns_the_bridge():
    torch.manual_seed(0)
    mdp = HageMDP(max_hops=3)
    scorer = WalkScorer(ScorerConfig(dim=32, rank=0, stop=False, lexical=False))  # the MDP has no stop action to learn
    opt = torch.optim.Adam(scorer.parameters(), lr=2e-2)
    gen = torch.Generator().manual_seed(0)
    tables, q, entries, gold = bridge_part(0)
    baseline = MovingBaseline(0.99, per_step=False)
    row, start, blocked, ep_gold = mdp.episodes(entries, gold)
    for _ in range(40):
        ctx = scorer.prepare(tables, q[row], start)
        ep = walk(tables, scorer, q[row], start, mdp.budget(), True, 1.0, gen, ctx, allow_stop=False, blocked=blocked)
        loss, _ = mdp.loss(scorer, ctx, ep, ep_gold, torch.cat([start, blocked], 1), baseline, 1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert unseen_recall(scorer) >= 0.9  # walked at question time under the evaluation budget
