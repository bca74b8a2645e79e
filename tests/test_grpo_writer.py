"""GRPO writer: the reward on hand-made completions, graph building from triples, and a short
GRPO run with a random tiny Llama on CPU."""

import math

import pytest
import torch

from graphmem.builders import GraphConfig, ground_mentions, link_mentions
from graphmem.core.graph import MemoryGraph
from models.gnn_reader import GNNReader
from rl.writer.format import anchor_map, format_score, judged_lines, parse_triples, repetition_rate, well_formed
from rl.writer.grpo import (
    PART_KEYS,
    ReaderReward,
    WriterConfig,
    WriterTask,
    byte_tokenizer,
    generation_failures,
    graph_from_triples,
    load_writer,
    named_by_anchor,
    quarter_comparison,
    rewrite_entity_edges,
    rewrite_graph,
    tasks_from_graph,
    train_last_layers,
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
    text = "(Alice | met | Bob) [F1]\n(Bob | flew to | Paris) [F2]\nnot a triple\n(X | y | z) [F9]\n\n"
    triples, good, total = parse_triples(text, ["a1", "a2", "b1", "b2"])
    assert (good, total) == (2, 4)
    assert triples == [("alice", "met", "bob", "a1"), ("bob", "flew to", "paris", "a2")]
    # line credits 1, 1, 0, 0.5 (label outside F1..F4); c = 0.5
    assert reward.format_reward(None, [text], ["t0"]) == [pytest.approx(2.5 / 4)]
    assert reward.format_reward(None, [""], ["t0"]) == [0.0]
    assert format_score("(a | b | c)\nx", ["a1"], partial=0.5) == pytest.approx(0.125)


def test_position_anchors_map_back_to_fragment_ids():
    ids = ["D3:7", "D3:8", "D4:1"]
    assert anchor_map(ids) == {"F1": "D3:7", "F2": "D3:8", "F3": "D4:1"}
    text = (
        "(a | r | b) [F3]\n(c | r | d) [ F1 ]\n(e | r | f) [F0]\n(g | r | h) [F4]\n(i | r | j) [D3:7]\n(k | r | l) [f2]"
    )
    triples, good, total = parse_triples(text, ids)
    assert triples == [("a", "r", "b", "D4:1"), ("c", "r", "d", "D3:7")]
    assert (good, total) == (2, 6)  # F0, F4 (k = 3), a raw id and a lower-case label are not anchors
    prompt = make_task().prompt()
    assert [line.split("]")[0] for line in prompt.splitlines() if line.startswith("[F")] == ["[F1", "[F2", "[F3", "[F4"]
    assert not any(f"[{f}]" in prompt for f in ("a1", "a2", "b1", "b2"))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("(Alice | met | Bob) [F1]\n\n(Bob | flew | Paris) [F4]\n", True),
        ("  (Alice | met | Bob)   [F2]  ", True),
        ("", False),
        ("\n \n", False),
        ("(Alice | met | Bob) [F1]\n(Bob | flew | Par", False),  # cut mid-line
        ("(Alice | met | Bob) [F1]\nTriples:", False),
        ("(Alice | met | Bob) [F5]", False),
        ("(Alice | met | Bob)", False),
        ("(Alice | met) [F1]", False),
        ("( | met | Bob) [F1]", False),
        ("(Alice | met | Bob) [F1] (Carol | met | Dan) [F2]", False),
    ],
)
def test_well_formed_on_crafted_texts(text, expected):
    assert well_formed(text, ["a1", "a2", "b1", "b2"]) is expected


def test_repetition_penalty(reward):
    text = "(Alice | met | Bob) [F1]\n(alice |  MET | bob) [F1]\n(Alice | met | Bob) [F1]"
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
    bridge = reward.components("(Alice | met | Bob) [F1]\n(Bob | flew to | Paris) [F2]", "t0")
    assert (bridge["r_rec"], bridge["r_pre"], bridge["r_task"]) == (1.0, 1.0, 1.0)
    wrong = reward.components("(Alice | met | Carol) [F1]\n(Carol | likes | tea) [F3]", "t0")
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
    new = rewrite_entity_edges(base, triples, GraphConfig(entity_fanout=3))
    assert new.num_edges == 5 and base.num_edges == 1
    assert sorted(new.edge_type.tolist()).count(new.relations.index("temporal")) == 1


def test_linked_mentions_join_every_fragment_that_names_a_written_entity():
    task = make_task()  # texts: Alice met Bob at noon / Bob flew to Paris / Carol likes tea / Dan sings
    triples = [("bob", "flew to", "paris", "a2")]  # only a2 is anchored; a1 names Bob too
    alone = graph_from_triples(triples, task.fragment_ids, task.texts, task.embeddings)
    assert alone.num_edges == 0
    linked = graph_from_triples(triples, task.fragment_ids, task.texts, task.embeddings, link=True)
    assert sorted(zip(linked.edge_index[0].tolist(), linked.edge_index[1].tolist())) == [(0, 1), (1, 0)]
    base = graph_from_triples([], task.fragment_ids, task.texts, task.embeddings)
    assert rewrite_entity_edges(base, triples, GraphConfig(entity_max_share=1.0)).num_edges == 0
    assert rewrite_entity_edges(base, triples, GraphConfig(entity_max_share=1.0), link=True).num_edges == 2
    torch.manual_seed(0)
    reader = GNNReader(input_dim=8, hidden_dim=4)
    for link, recall in ((False, 0.5), (True, 1.0)):  # the query's entry is a1; its gold a1 and a2
        cfg = WriterConfig(reader_budget=BUDGET, link_mentions=link)
        assert ReaderReward([task], reader, cfg).components("(Bob | flew to | Paris) [F2]", "t0")["r_rec"] == recall


def test_link_mentions_matches_whole_word_runs_case_blind():
    texts = ["New York in May", "a new yorker", "BOBBY and Bob", "nothing"]
    own = [{"new york"}, set(), {"bob"}, {"!!"}]
    assert link_mentions(texts, own) == [{"new york"}, set(), {"bob"}, {"!!"}]
    assert link_mentions(["bob", "Bob's new  York"], [{"bob"}, {"new york"}]) == [{"bob"}, {"bob", "new york"}]


def test_ground_mentions_keeps_only_the_entities_a_text_names():
    texts = ["New York in May", "Bob sings", "nothing here"]
    own = [{"new york", "paris"}, {"bob", "bobby", "!!"}, set()]
    assert ground_mentions(texts, own) == [{"new york"}, {"bob"}, set()]


def test_named_by_anchor_counts_the_heads_and_tails_their_fragment_names():
    triples = [("bob", "flew to", "paris", "a2"), ("alice", "met", "carol", "a1"), ("tea", "is", "tea", "b1")]
    texts = ["Alice met Bob at noon", "Bob flew to Paris", "Carol likes tea", "Dan sings"]
    assert named_by_anchor(triples, ["a1", "a2", "b1", "b2"], texts) == (6, 5)  # carol is not named by a1


def test_grounded_entities_make_the_same_edges_however_many_windows_write_them():
    """Ungrounded, an entity no text names joins the fragments it is written for (a clique per window that
    disappears under the share cap once every window writes it); grounded and linked, an entity's fragments are
    those that name it, so one window's triples make exactly the edges they make beside every other window's."""
    texts = [f"passage {i} about topic{i % 3}" for i in range(12)] + ["Paris is big", "I saw Paris"]
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(14)], texts, torch.nn.functional.normalize(torch.randn(14, 4), dim=1))
    cfg = GraphConfig(entity_fanout=3, entity_max_share=0.1)  # entities in more than 10 fragments are skipped
    windows = [[f"n{i}" for i in range(lo, lo + 2)] for lo in range(0, 14, 2)]
    every = [("glue", "with", "paris", w[k]) for w in windows for k in (0, 1)]  # every window writes both
    one = every[-2:]  # the last window's two triples: n12 and n13
    entity = lambda h: sorted(zip(h.edge_index[0].tolist(), h.edge_index[1].tolist()))  # noqa: E731
    loose_one, loose_every = (entity(rewrite_entity_edges(g, t, cfg, link=True)) for t in (one, every))
    assert (12, 13) in loose_one and loose_every == []  # glue is in 14 fragments: past the cap, with paris
    kept_one, kept_every = (entity(rewrite_entity_edges(g, t, cfg, link=True, grounded=True)) for t in (one, every))
    assert kept_one == kept_every == [(12, 13), (13, 12)]  # paris, named by n12 and n13 only
    # in the window's own graph too: a written entity its fragment does not name is dropped
    alone = graph_from_triples([("glue", "with", "glue", "n0"), ("glue", "with", "glue", "n1")], ["n0", "n1"],
                               texts[:2], g.embeddings[:2], grounded=True)  # fmt: skip
    assert alone.num_edges == 0


def test_tasks_from_graph_windows():
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(5)], [f"t{i}" for i in range(5)], torch.eye(5, 4))
    tasks = tasks_from_graph(g, "g", torch.randn(2, 4), [("n0", "n3"), ("n4",)], fragments_per_task=2)
    assert [t.task_id for t in tasks] == ["g@0", "g@2", "g@4"]
    assert [t.gold for t in tasks] == [[["n0"]], [["n3"]], [["n4"]]]


def test_tasks_from_graph_min_gold_keeps_windows_holding_two_gold_passages():
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(6)], [f"t{i}" for i in range(6)], torch.eye(6, 4))
    evidence = [("n0", "n1"), ("n2", "n4"), ("n5",), ("n3", "gone")]  # the last: one of its gold not in the graph
    tasks = tasks_from_graph(g, "g", torch.randn(4, 4), evidence, fragments_per_task=3, min_gold=2)
    assert [t.task_id for t in tasks] == ["g@0", "g@3"]
    assert [t.gold for t in tasks] == [[["n0", "n1"]], [["n5"], ["n3"]]]
    assert tasks[1].query_embeddings.shape[0] == 2  # questions 2 and 3: each holds all its gold present


def whole_graph():
    """Two windows of two fragments: the query's entry is w0 (``Bob flew to Paris``), its other gold passage is
    w3, in the other window, which names Paris."""
    torch.manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
    g = MemoryGraph.empty(8)
    texts = ["Bob flew to Paris", "Carol likes tea", "Dan sings", "Paris is the capital of France"]
    g.add_nodes(["w0", "w1", "w2", "w3"], texts, emb)
    g.add_edges([1], [2], "temporal")
    return g, emb[[0]].clone()


def test_tasks_on_the_whole_graph_keep_the_graph_and_the_gold_outside_the_window():
    g, query = whole_graph()
    evidence = [("w0", "w3"), ("w2", "gone")]
    window = tasks_from_graph(g, "g", torch.cat([query, query]), evidence, fragments_per_task=2)
    whole = tasks_from_graph(g, "g", torch.cat([query, query]), evidence, fragments_per_task=2, whole=True)
    assert [t.gold for t in window] == [[["w0"]], [["w3"], ["w2"]]]
    assert [t.gold for t in whole] == [[["w0", "w3"]], [["w0", "w3"], ["w2"]]]
    assert all(t.graph is None for t in window) and all(t.graph is g for t in whole)


def test_whole_graph_reward_pays_the_entity_that_reaches_gold_in_another_window():
    g, query = whole_graph()
    torch.manual_seed(0)
    reader = GNNReader(input_dim=8, hidden_dim=4)
    task = tasks_from_graph(g, "g", query, [("w0", "w3")], fragments_per_task=2, whole=True)[0]
    cfg = WriterConfig(reader_budget=BUDGET, link_mentions=True, reward_graph="whole")
    reward = ReaderReward([task], reader, cfg, graph_cfg=GraphConfig(entity_max_share=1.0))
    # the reader loads its entry w0 and one neighbour: w3 only through the written entity Paris, which w3 names
    assert reward.components("(Bob | flew to | Paris) [F1]", task.task_id)["r_rec"] == 1.0
    assert reward.components("(Bob | likes | tea) [F1]", task.task_id)["r_rec"] == 0.5
    assert reward.components("", task.task_id)["r_rec"] == 0.5
    # a window reward never sees w3: there the bridge earns no more than writing nothing
    alone = tasks_from_graph(g, "g", query, [("w0", "w3")], fragments_per_task=2)[0]
    window = ReaderReward([alone], reader, WriterConfig(reader_budget=BUDGET, link_mentions=True))
    assert [window.components(c, alone.task_id)["r_rec"] for c in ("(Bob | flew to | Paris) [F1]", "")] == [1.0, 1.0]
    assert g.num_edges == 1  # the task's graph is left as it was


def test_whole_graph_reward_needs_the_graph_config_and_a_known_scope():
    g, query = whole_graph()
    task = tasks_from_graph(g, "g", query, [("w0", "w3")], fragments_per_task=2, whole=True)[0]
    with pytest.raises(ValueError, match="graph_cfg"):
        ReaderReward([task], GNNReader(input_dim=8, hidden_dim=4), WriterConfig(reward_graph="whole"))
    with pytest.raises(ValueError, match="writer.reward_graph: 'graph'"):
        WriterConfig(reward_graph="graph")


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
    trainer, history, records = train_writer(tasks, reader, cfg, model=model, tokenizer=tok)
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        assert math.isfinite(h["reward"]) and 0.0 <= h["rewards/task_reward/mean"] <= 1.0
    # one record per sampled completion, with the step it was sampled for; their means are what trl logged
    assert [r["step"] for r in records] == [1] * cfg.batch_size + [2] * cfg.batch_size
    for step, h in zip((1, 2), history):
        rows = [r for r in records if r["step"] == step]
        assert sum(r["task"] for r in rows) / len(rows) == pytest.approx(h["rewards/task_reward/mean"], abs=1e-6)
        assert sum(r["format"] for r in rows) / len(rows) == pytest.approx(h["rewards/format_reward/mean"], abs=1e-6)
    assert len(before) == len(list(trainer.model.parameters()))


def test_rewrite_graph_batched_generation_keeps_nodes():
    model, tok = load_writer("tiny", seed=0)
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(5)], [f"text {i}" * (i + 1) for i in range(5)], torch.eye(5, 4))
    g.add_edges([0], [1], "temporal")
    cfg = WriterConfig(fragments_per_task=2, max_completion_length=6)
    one, n1 = rewrite_graph(model, tok, g, cfg, GraphConfig(), batch_size=1)
    many, n3 = rewrite_graph(model, tok, g, cfg, GraphConfig(), batch_size=3)
    assert one.node_ids == g.node_ids == many.node_ids and n1 >= 0 and n3 >= 0
    temporal = g.relations.index("temporal")
    assert int((many.edge_type == temporal).sum()) == 1


# ---------------------------------------------------------------------- warm start (rl/writer/sft.py)
def test_silver_triples_join_fragments_that_share_an_entity():
    from graphmem.builders.entities import make_entity_extractor
    from rl.writer.sft import silver_triples

    task = make_task()
    task.texts = ["We saw Alice meet Bob in Paris.", "Then Bob flew to Rome.", "We heard Carol sing.", "it was fine"]
    text = silver_triples(task, make_entity_extractor("offline"))
    lines = text.splitlines()
    # round the fragments: the first line of each, then the second of each
    assert lines == [
        "(alice | with | bob) [F1]",
        "(bob | with | rome) [F2]",
        "(carol | is | carol) [F3]",
        "(bob | with | paris) [F1]",
    ]
    assert silver_triples(task, make_entity_extractor("offline"), max_lines=3).splitlines() == lines[:3]
    # from the text the prompt shows, as that text writes it: 21 characters show "We saw Alice meet Bob" and
    # "Then Bob flew to Rome"; 20 cut "Bob" and "Rome", whose parts are left out
    shown = silver_triples(task, make_entity_extractor("offline"), shown_chars=21).splitlines()
    assert shown == ["(Alice | with | Bob) [F1]", "(Bob | with | Rome) [F2]", "(Carol | is | Carol) [F3]"]
    shown = silver_triples(task, make_entity_extractor("offline"), shown_chars=20).splitlines()
    assert shown == ["(Alice | is | Alice) [F1]", "(Bob | is | Bob) [F2]", "(Carol | is | Carol) [F3]"]
    assert well_formed(text, task.fragment_ids) and not well_formed(text + "\nnot a triple", task.fragment_ids)
    triples, _, _ = parse_triples(text, task.fragment_ids)
    g = graph_from_triples(triples, task.fragment_ids, task.texts, task.embeddings)
    pairs = set(zip(g.edge_index[0].tolist(), g.edge_index[1].tolist()))
    assert pairs == {(0, 1), (1, 0)}  # "bob" links the first two fragments, nothing else is shared


def test_warm_start_teaches_the_format_on_held_out_tasks(tmp_path):
    """SFT on silver lines makes greedy outputs of *unseen* tasks well-formed (none were before)."""
    import random

    from graphmem.builders.entities import make_entity_extractor
    from rl.writer.sft import SFTConfig, warm_start, well_formed_fraction

    names = ["Alice", "Bob", "Carol", "Dan", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo"]
    verbs = ["met", "saw", "called", "helped"]
    rng = random.Random(0)

    def task(k):
        t = make_task(f"t{k}")
        t.fragment_ids = [f"D{k}:{j}" for j in range(1, 5)]
        t.texts = [f"{rng.choice(names)} {rng.choice(verbs)} {rng.choice(names)}." for _ in range(4)]
        return t

    train, held_out = [task(k) for k in range(64)], [task(k) for k in range(100, 104)]
    cfg = WriterConfig(fragments_per_task=4, max_completion_length=120, output_dir=str(tmp_path), seed=0)
    model, tok = load_writer("tiny", seed=0, hidden=32, layers=2)
    before = well_formed_fraction(model, tok, held_out, cfg)
    model, log = warm_start(
        model,
        tok,
        train,
        make_entity_extractor("offline"),
        cfg,
        SFTConfig(max_steps=120, batch_size=8, learning_rate=5e-3, max_lines=3),
    )
    after = well_formed_fraction(model, tok, held_out, cfg)
    assert before == 0.0 and after >= 0.75, (before, after)
    assert log[-1]["loss"] < log[0]["loss"]


def test_a_trainable_copy_of_a_warm_started_writer_computes_with_its_own_weights(tmp_path):
    """After a trainer ran on the writer, a copy for another training run must depend on its own parameters only:
    moving them moves its logits and leaves the original's, and it trains the same blocks."""
    from graphmem.builders.entities import make_entity_extractor
    from rl.writer.model import trainable_copy
    from rl.writer.sft import SFTConfig, warm_start

    tasks = []
    for k in range(8):
        t = make_task(f"t{k}")
        t.fragment_ids, t.texts = [f"D{k}:1", f"D{k}:2"], ["Alice met Bob.", "Bob saw Carol."]
        tasks.append(t)
    cfg = WriterConfig(fragments_per_task=2, max_completion_length=16, output_dir=str(tmp_path), seed=0)
    model, tok = load_writer("tiny", seed=0, hidden=16, layers=2)
    train_last_layers(model, 1)
    model, _ = warm_start(
        model, tok, tasks, make_entity_extractor("offline"), cfg, SFTConfig(max_steps=2, batch_size=4)
    )
    copy_ = trainable_copy(model, 1)
    assert copy_.training and [p.requires_grad for p in copy_.parameters()] == [
        p.requires_grad for p in model.parameters()
    ]
    x = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        original, before = model.eval()(x).logits.clone(), copy_.eval()(x).logits.clone()
        assert torch.equal(before, original)
        for p in copy_.parameters():
            if p.requires_grad:
                p.add_(0.5)
        assert not torch.allclose(copy_(x).logits, before)
        assert torch.equal(model(x).logits, original)


def test_rewrite_joins_shared_entities_with_the_builders_caps_not_a_clique():
    g = MemoryGraph.empty(4)
    g.add_nodes([f"n{i}" for i in range(12)], [f"text {i}" for i in range(12)], torch.eye(12, 4))
    triples = [("alice", "said", f"thing {i}", f"n{i}") for i in range(12)]  # one name in every fragment
    clique = 12 * 11
    capped = rewrite_entity_edges(g, triples, GraphConfig(entity_fanout=2, entity_max_share=1.0))
    assert capped.num_edges == 2 * (2 * 12 - 3) < clique  # each mention to its next 2 mentions, both ways
    assert rewrite_entity_edges(g, triples, GraphConfig(entity_fanout=2, entity_max_share=0.5)).num_edges == 0


def test_quarter_comparison_pairs_by_task():
    # 8 steps: quarters are steps 1-2 and 7-8. Task "hard" earns 0 and "easy" 1 throughout, except that
    # "hard" rises by 0.5 in the last quarter; the first quarter draws "easy" more often than the last.
    records = []
    for step in range(1, 9):
        draws = ["easy", "easy", "easy", "hard"] if step <= 2 else ["easy", "hard", "hard", "hard"]
        for t in draws:
            task = (0.5 if step >= 7 else 0.0) if t == "hard" else 1.0
            records.append({"step": step, "task_id": t, "task": task, "format": 0.5, "well_formed": 1.0})
    q = quarter_comparison(records, lambda_fmt=0.2)
    assert q["task"]["n"] == 2 and q["task"]["mean_diff"] == pytest.approx(0.25)  # (0.5 + 0) / 2 tasks
    assert q["reward"]["mean_diff"] == pytest.approx(0.25) and q["format"]["mean_diff"] == 0.0
    # the unpaired per-completion means would read the change of mix as a drop: 0.75 -> 0.625
    assert quarter_comparison(records[:8], 0.2)["task"] is None  # two steps: no quarter


def test_grpo_groups_are_the_completions_of_one_task_and_the_parts_are_logged(tmp_path):
    """trl repeats each prompt num_generations times: per step, each drawn task has exactly that many
    completions; the zero-weight parts r_rec, r_pre, rho_rep are logged per step as the records' means."""
    torch.manual_seed(0)
    tasks = [make_task(f"t{k}") for k in range(4)]
    reader = GNNReader(input_dim=8, hidden_dim=4)
    cfg = WriterConfig(
        max_steps=3, batch_size=6, num_generations=3, max_completion_length=8, reader_budget=BUDGET,
        output_dir=str(tmp_path), seed=0,
    )  # fmt: skip
    model, tok = load_writer("tiny", seed=0, hidden=16, layers=1)
    _, history, records = train_writer(tasks, reader, cfg, model=model, tokenizer=tok)
    for step in (1, 2, 3):
        counts: dict[str, int] = {}
        for r in records:
            if r["step"] == step:
                counts[r["task_id"]] = counts.get(r["task_id"], 0) + 1
        assert sorted(counts.values()) == [3, 3], counts  # two groups of three
    for h in history:
        rows = [r for r in records if r["step"] == h["step"]]
        for part in PART_KEYS:
            assert h[f"rewards/{part}/mean"] == pytest.approx(sum(r[part] for r in rows) / len(rows), abs=1e-6)
    failures = generation_failures(records)
    assert failures["completions"] == len(records) == 18
    assert failures["not_well_formed"] == sum(1 for r in records if not r["well_formed"])


def test_batch_must_hold_whole_groups():
    cfg = WriterConfig(batch_size=6, num_generations=4)
    with pytest.raises(ValueError, match="multiple of writer.num_generations"):
        train_writer(
            [make_task()], GNNReader(input_dim=8, hidden_dim=4), cfg, *load_writer("tiny", hidden=16, layers=1)
        )


def test_generation_failures_count_completions_and_lines():
    rows = [
        {"lines": 0, "valid_lines": 0, "well_formed": 0.0},  # empty
        {"lines": 3, "valid_lines": 2, "well_formed": 0.0},
        {"lines": 2, "valid_lines": 2, "well_formed": 1.0, "cut_lines": 1},
    ]
    assert generation_failures(rows) == {
        "completions": 3,
        "empty": 1,
        "not_well_formed": 2,
        "lines": 5,
        "unparsed_lines": 1,
        "cut_lines": 1,
        "not_well_formed_share": pytest.approx(2 / 3),
        "unparsed_line_share": pytest.approx(0.2),
    }
    assert generation_failures([])["completions"] == 0


def test_partial_fine_tuning_trains_only_the_last_blocks_and_the_norm():
    model, _ = load_writer("tiny", hidden=16, layers=3)
    counts = train_last_layers(model, 1)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(n.startswith(("model.layers.2.", "model.norm.")) for n in trained)
    assert "model.embed_tokens.weight" not in trained
    assert counts["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad) < counts["total"]
    assert train_last_layers(model, None)["trainable"] == counts["trainable"]  # null leaves the flags as they are
    with pytest.raises(ValueError, match="trainable_layers"):
        train_last_layers(model, 0)


def test_chat_template_follows_the_tokenizer_when_unset():
    from rl.writer.grpo import uses_chat

    tok = byte_tokenizer()
    assert uses_chat(WriterConfig(chat_template=None), tok) is False
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert uses_chat(WriterConfig(chat_template=None), tok) is True
    assert uses_chat(WriterConfig(chat_template=False), tok) is False


def test_a_cut_completion_loses_only_its_unfinished_last_line():
    ids = ["a1", "a2"]
    text = "(x | r | y) [F1]\n(y | r | z) [F2]\n(z | r"
    assert not well_formed(text, ids) and parse_triples(text, ids)[1:] == (2, 3)
    assert well_formed(text, ids, cut=True) and parse_triples(text, ids, cut=True)[1:] == (2, 2)
    assert format_score(text, ids, cut=True) == 1.0 > format_score(text, ids)
    assert judged_lines(text, cut=True)[1] == 1 and judged_lines(text)[1] == 0
    # a complete last line is kept even when cut; a malformed line before the last is never dropped
    assert parse_triples("(x | r | y) [F1]", ids, cut=True)[1:] == (1, 1)
    assert not well_formed("garbage\n(x | r | y) [F1]\n(z | r", ids, cut=True)


def test_the_reward_reads_the_cut_from_the_completion_ids():
    task = make_task()
    cfg = WriterConfig(reader_budget=BUDGET, max_completion_length=4)
    reward = ReaderReward([task], GNNReader(input_dim=8, hidden_dim=4), cfg, eos_token_id=2)
    text = "(x | r | y) [F1]\n(z | r"
    assert reward.cut([5, 6, 7, 8]) and not reward.cut([5, 6, 7, 2]) and not reward.cut([5, 6])
    cut, ended = reward.format_reward(None, [text, text], [task.task_id] * 2, completion_ids=[[5, 6, 7, 8], [5, 2]])
    assert cut == 1.0 and ended < 1.0


def test_fresh_copy_holds_the_weights_and_leaves_the_rng_alone():
    from rl.writer.model import fresh_copy

    model, _ = load_writer("tiny", seed=3, hidden=16, layers=1)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)  # weights unlike any fresh initialisation
    state = torch.random.get_rng_state()
    copy_ = fresh_copy(model)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert copy_ is not model and not copy_.training
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(copy_(x).logits, model.eval()(x).logits)
    assert copy_.generation_config.to_dict() == model.generation_config.to_dict()
