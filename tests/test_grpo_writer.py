"""GRPO writer: the reward on hand-made completions, graph building from triples, and a short
GRPO run with a random tiny Llama on CPU."""

import math

import pytest
import torch

from graphmem.graph import MemoryGraph
from models.gnn_reader import GNNReader
from rl.grpo_writer import (
    ReaderReward,
    WriterConfig,
    WriterTask,
    byte_tokenizer,
    format_score,
    graph_from_triples,
    load_writer,
    parse_triples,
    repetition_rate,
    rewrite_entity_edges,
    rewrite_graph,
    tasks_from_graph,
    train_writer,
)

BUDGET = {"max_entries": 1, "top_k_neighbors": 1, "max_hops": 1, "max_nodes": 2}


def make_task(task_id="t0"):
    torch.manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
    return WriterTask(
        task_id,
        ["a1", "a2", "b1", "b2"],
        ["Alice met Bob at noon", "Bob flew to Paris", "Carol likes tea", "Dan sings"],
        emb,
        emb[[0]].clone(),
        [["a1", "a2"]],
    )


@pytest.fixture
def reward():
    torch.manual_seed(0)
    return ReaderReward(
        [make_task()], GNNReader(input_dim=8, hidden_dim=4), WriterConfig(reader_budget=BUDGET, lambda_rep=0.5)
    )


def test_parse_and_format_reward(reward):
    text = "(Alice | met | Bob) [a1]\n(Bob | flew to | Paris) [a2]\nnot a triple\n(X | y | z) [zz]\n\n"
    triples, good, total = parse_triples(text, ["a1", "a2", "b1", "b2"])
    assert (good, total) == (2, 4)
    assert triples == [("alice", "met", "bob", "a1"), ("bob", "flew to", "paris", "a2")]
    # line credits 1, 1, 0, 0.5 (anchor not in the task); c = 0.5
    assert reward.format_reward(None, [text], ["t0"]) == [pytest.approx(2.5 / 4)]
    assert reward.format_reward(None, [""], ["t0"]) == [0.0]
    assert format_score("(a | b | c)\nx", ["a1"], partial=0.5) == pytest.approx(0.125)


def test_repetition_penalty(reward):
    text = "(Alice | met | Bob) [a1]\n(alice |  MET | bob) [a1]\n(Alice | met | Bob) [a1]"
    triples, _, _ = parse_triples(text, ["a1"])
    assert repetition_rate(triples) == pytest.approx(2 / 3)
    assert repetition_rate([]) == 0.0
    parts = reward.components(text, "t0")
    assert parts["rho_rep"] == pytest.approx(2 / 3)
    [r] = reward.task_reward(None, [text], ["t0"])
    assert r == pytest.approx(parts["r_task"] - 0.5 * 2 / 3)


def test_recall_and_precision_follow_the_written_links(reward):
    # entry = a1 (the query is a1's embedding); one hop, one neighbor, two nodes loaded
    nothing = reward.components("", "t0")
    assert (nothing["r_rec"], nothing["r_pre"], nothing["r_task"]) == (0.5, 1.0, 0.75)
    bridge = reward.components("(Alice | met | Bob) [a1]\n(Bob | flew to | Paris) [a2]", "t0")
    assert (bridge["r_rec"], bridge["r_pre"], bridge["r_task"]) == (1.0, 1.0, 1.0)
    wrong = reward.components("(Alice | met | Carol) [a1]\n(Carol | likes | tea) [b1]", "t0")
    assert (wrong["r_rec"], wrong["r_pre"], wrong["r_task"]) == (0.5, 0.5, 0.5)


def test_graph_from_triples_and_rewrite():
    task = make_task()
    triples = [("bob", "met", "alice", "a1"), ("bob", "flew to", "paris", "a2"), ("paris", "is", "city", "b2")]
    g = graph_from_triples(triples, task.fragment_ids, task.texts, task.embeddings)
    pairs = sorted(zip(g.edge_index[0].tolist(), g.edge_index[1].tolist()))
    assert pairs == [(0, 1), (1, 0), (1, 3), (3, 1)]
    assert set(g.edge_type.tolist()) == {g.relations.index("entity")}
    base = graph_from_triples([], task.fragment_ids, task.texts, task.embeddings)
    base.add_edges([0], [2], "temporal")
    new = rewrite_entity_edges(base, triples)
    assert new.num_edges == 5 and base.num_edges == 1
    assert sorted(new.edge_type.tolist()).count(new.relations.index("temporal")) == 1


def test_tasks_from_graph_windows():
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(5)], [f"t{i}" for i in range(5)], torch.eye(5, 4))
    tasks = tasks_from_graph(g, "g", torch.randn(2, 4), [("n0", "n3"), ("n4",)], fragments_per_task=2)
    assert [t.task_id for t in tasks] == ["g@0", "g@2", "g@4"]
    assert [t.gold for t in tasks] == [[["n0"]], [["n3"]], [["n4"]]]


def test_byte_tokenizer_round_trip():
    tok = byte_tokenizer()
    text = "(Alice | met | Bob) [D1:3] é"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_short_grpo_run_completes(tmp_path):
    torch.manual_seed(0)
    tasks = [make_task("t0"), make_task("t1")]
    reader = GNNReader(input_dim=8, hidden_dim=4)
    cfg = WriterConfig(max_steps=2, max_completion_length=12, reader_budget=BUDGET, output_dir=str(tmp_path), seed=0)
    model, tok = load_writer("tiny", seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    trainer, history = train_writer(tasks, reader, cfg, model=model, tokenizer=tok)
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        assert math.isfinite(h["reward"]) and 0.0 <= h["rewards/task_reward/mean"] <= 1.0
    assert len(before) == len(list(trainer.model.parameters()))


def test_rewrite_graph_batched_generation_keeps_nodes():
    model, tok = load_writer("tiny", seed=0)
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(5)], [f"text {i}" * (i + 1) for i in range(5)], torch.eye(5, 4))
    g.add_edges([0], [1], "temporal")
    cfg = WriterConfig(fragments_per_task=2, max_completion_length=6)
    one, n1 = rewrite_graph(model, tok, g, cfg, batch_size=1)
    many, n3 = rewrite_graph(model, tok, g, cfg, batch_size=3)
    assert one.node_ids == g.node_ids == many.node_ids and n1 >= 0 and n3 >= 0
    temporal = g.relations.index("temporal")
    assert int((many.edge_type == temporal).sum()) == 1


# ---------------------------------------------------------------------- warm start (rl/writer_sft.py)
def test_silver_triples_join_fragments_that_share_an_entity():
    from graphmem.build.entities import make_entity_extractor
    from rl.writer_sft import silver_triples, well_formed

    task = make_task()
    task.texts = ["We saw Alice meet Bob in Paris.", "Then Bob flew to Rome.", "We heard Carol sing.", "it was fine"]
    text = silver_triples(task, make_entity_extractor("offline"))
    lines = text.splitlines()
    assert lines[:3] == ["(alice | with | bob) [a1]", "(bob | with | paris) [a1]", "(bob | with | rome) [a2]"]
    assert "(carol | in | b1) [b1]" in lines and not any(line.endswith("[b2]") for line in lines)
    assert well_formed(text, task.fragment_ids) and not well_formed(text + "\nnot a triple", task.fragment_ids)
    assert not well_formed("", task.fragment_ids) and not well_formed("(a | b | c) [zz]", task.fragment_ids)
    triples, _, _ = parse_triples(text, task.fragment_ids)
    g = graph_from_triples(triples, task.fragment_ids, task.texts, task.embeddings)
    pairs = set(zip(g.edge_index[0].tolist(), g.edge_index[1].tolist()))
    assert pairs == {(0, 1), (1, 0)}  # "bob" links the first two fragments, nothing else is shared


def test_warm_start_teaches_the_format(tmp_path):
    from graphmem.build.entities import make_entity_extractor
    from rl.writer_sft import SFTConfig, warm_start, well_formed_fraction

    torch.manual_seed(0)
    tasks = []
    for k in range(4):
        t = make_task(f"t{k}")
        t.fragment_ids = ["D1:1", "D1:2", "D1:3", "D1:4"]
        t.texts = ["Alice met Bob.", "Bob saw Carol.", "Carol met Dan.", "Dan met Alice."][k:] + ["Eve met Fay."] * k
        tasks.append(t)
    cfg = WriterConfig(fragments_per_task=4, max_completion_length=120, output_dir=str(tmp_path), seed=0)
    model, tok = load_writer("tiny", seed=0)
    before = well_formed_fraction(model, tok, tasks, cfg)
    model, log = warm_start(
        model,
        tok,
        tasks,
        make_entity_extractor("offline"),
        cfg,
        SFTConfig(max_steps=150, batch_size=4, learning_rate=3e-3),
    )
    after = well_formed_fraction(model, tok, tasks, cfg)
    assert before == 0.0 and after >= 0.75, (before, after)
    assert log[-1]["loss"] < log[0]["loss"]
