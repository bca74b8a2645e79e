"""The held-out writer study (``scripts/studies/writer_heldout/run.py``) in its smoke configuration: three LoCoMo
conversations with the hashing encoder, the random tiny writer, two GRPO steps. Checks the results' structure,
that the three arms share nodes, non-entity edges and the reader and differ only in the test graphs' entity edges,
and that the paired figures are the differences of the per-arm figures."""

import json

import pytest

import rl.common.splits  # noqa: F401  (registers the split schema before compose)
from graphmem.store.graphset import GraphSet
from tests.script_loader import compose, load_study
from tests.small_sets import saved_locomo_set

PAIRED_KEYS = {"mean_diff", "ci_low", "ci_high", "n", "mean", "reference_mean", "p_value"}


def smoke_config(root, gs_dir, results: str, *overrides: str):
    """The smoke study on the saved set ``gs_dir``, its outputs under ``root``."""
    paths = [f"graphset={gs_dir}", f"results={root / results}", f"out_dir={root / 'run'}"]
    return compose(
        "writer_heldout", ["experiment=writer_heldout_smoke", *paths, f"writer.output_dir={root / 'trl'}", *overrides]
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("writer_heldout")
    gs_dir = saved_locomo_set(root, limit=3)
    returned = load_study("writer_heldout", "run").run(smoke_config(root, gs_dir, "writer_heldout.json"))
    return root, gs_dir, json.loads((root / "writer_heldout.json").read_text()), returned


def test_results_hold_every_arm_pair_and_run_fact(study):
    root, _, res, returned = study
    assert res == json.loads(json.dumps(returned))
    assert res["command"].startswith("python scripts/studies/writer_heldout/run.py")
    assert set(res["reader_recall"]) == {"builder", "sft", "grpo", "none"}
    assert all(0.0 <= v <= 1.0 for v in res["reader_recall"].values())
    assert {"grpo_minus_sft", "grpo_minus_builder", "builder_minus_none", "grpo_minus_none"} <= set(res["paired"])
    for name, c in res["paired"].items():
        a, b = name.split("_minus_")
        assert PAIRED_KEYS <= set(c) and c["n"] == res["questions"]["test"] >= 2
        assert c["mean"] == pytest.approx(res["reader_recall"][a]) and c["reference_mean"] == pytest.approx(
            res["reader_recall"][b]
        )
        assert c["mean_diff"] == pytest.approx(c["mean"] - c["reference_mean"])
        assert c["ci_low"] <= c["mean_diff"] <= c["ci_high"]
    tr = res["task_reward"]
    assert tr["paired"]["n"] == res["questions"]["test_tasks"] >= 2
    assert tr["paired"]["mean_diff"] == pytest.approx(tr["after"] - tr["before"])
    assert set(tr["parts"]["sft"]) == {"r_rec", "r_pre", "rho_rep", "r_task", "task"}
    assert res["wall_s"] > 0 and res["peak_memory_mb"] is not None and res["max_rss_mb"] > 0
    assert res["rewrite_decoding"] == "fresh_copy"
    steps = [c["step"] for c in res["grpo"]["curve"]]
    assert steps == [1, 2]
    for c in res["grpo"]["curve"]:
        assert {"rewards/r_rec/mean", "rewards/r_pre/mean", "rewards/rho_rep/mean", "reward"} <= set(c)
    assert (root / res["curve_png"]).stat().st_size > 0
    for arm in ("sft", "grpo"):
        f = res["writes"][arm]["generation_failures"]
        assert f["completions"] == res["writes"][arm]["windows"] and 0 <= f["not_well_formed"] <= f["completions"]
        # every greedy completion is kept beside the run, the held-out task windows with their reward parts
        rows = [json.loads(line) for line in (root / "run" / f"completions_{arm}.jsonl").read_text().splitlines()]
        assert len(rows) == res["writes"][arm]["windows"] and all(isinstance(r["text"], str) for r in rows)
        ents = res["writes"][arm]["entities"]
        assert ents["written"] == 2 * res["writes"][arm]["triples"] >= ents["named_by_anchor"] >= 0
        scored = [r["reward"]["task"] for r in rows if "reward" in r]
        assert len(scored) == res["questions"]["test_tasks"]
        assert sum(scored) / len(scored) == pytest.approx(res["task_reward"]["before" if arm == "sft" else "after"])
    evolved = (root / "run" / "completions_self_evolution.jsonl").read_text().splitlines()
    assert len(evolved) == res["self_evolution"]["writes"]["windows"] and "completions" not in res["writes"]["sft"]


def test_arms_differ_only_in_the_test_graphs_entity_edges(study):
    _, gs_dir, res, _ = study
    g = res["graphs"]
    for arm in ("sft", "grpo", "none"):
        assert g[arm]["nodes"] == g["builder"]["nodes"]
        assert g[arm]["other_edges"] == g["builder"]["other_edges"]
    assert g["none"]["entity_edge_count"] == 0
    # the writers' triples replace the builder's entity edges: none without a triple, at most the fan-out's bound
    fanout = GraphSet.load(gs_dir).provenance["graph"]["entity_fanout"]
    assert g["builder"]["entity_edge_count"] > 0
    for arm in ("sft", "grpo"):
        triples = res["writes"][arm]["triples"]
        assert g[arm]["entity_edge_count"] <= 2 * fanout * 2 * triples
        assert (g[arm]["entity_edges"] == g["builder"]["entity_edges"]) is False or triples > 0
    split = res["split"]
    names = set(GraphSet.load(gs_dir).graphs)
    assert set(split["test"]) | set(split["train"]) | set(split["val"]) == names and len(split["test"]) == 1
    assert not set(split["test"]) & (set(split["train"]) | set(split["val"]))
    # one frozen reader, trained on the training conversations, for every arm
    assert res["reader"]["checkpoint"].endswith("reader.pt") and len(res["reader"]["history"]) == 1


def test_graph_digest_sees_entity_edges_apart_from_the_rest(tmp_path):
    """The digest the arms are compared by: a rewrite changes only its entity part; a changed feature of
    another edge changes the other part."""
    from graphmem.builders import GraphConfig
    from rl.writer.grpo import rewrite_entity_edges

    digest = load_study("writer_heldout", "run").graph_digest
    gs = GraphSet.load(saved_locomo_set(tmp_path, limit=1))
    name, graph = next(iter(gs.graphs.items()))
    base = digest({name: graph})
    triples = [("melanie", "likes", "pottery", graph.node_ids[0]), ("melanie", "paints", "art", graph.node_ids[5])]
    new = digest({name: rewrite_entity_edges(graph, triples, GraphConfig(**gs.provenance["graph"]))})
    assert new["nodes"] == base["nodes"] and new["other_edges"] == base["other_edges"]
    assert new["entity_edges"] != base["entity_edges"] and new["entity_edge_count"] == 2
    changed = graph.copy()
    other = int((changed.edge_type != changed.relations.index("entity")).nonzero()[0])
    changed.edge_attr[other, 0] += 0.5
    assert digest({name: changed})["other_edges"] != base["other_edges"]


def test_self_evolution_retrains_the_reader_on_writer_built_training_graphs(study):
    _, gs_dir, res, _ = study
    evo, split = res["self_evolution"], res["split"]
    assert evo["rewritten"] == split["train"] + split["val"]
    assert evo["reader"]["checkpoint"].endswith("self_evolution/reader.pt")
    assert evo["reader"]["checkpoint"] != res["reader"]["checkpoint"]
    # the rewritten training graphs keep the builder's nodes and other edges; only their entity edges are the writer's
    base = GraphSet.load(gs_dir)
    digest = load_study("writer_heldout", "run").graph_digest
    kept = digest({n: base.graphs[n] for n in evo["rewritten"]})
    assert evo["graphs"]["nodes"] == kept["nodes"] and evo["graphs"]["other_edges"] == kept["other_edges"]
    assert evo["writes"]["windows"] == evo["writes"]["generation_failures"]["completions"] > 0
    assert set(evo["reader_recall"]) == {"builder", "sft", "grpo", "none"}
    for name in ("grpo_minus_sft", "grpo_minus_builder", "evolved_minus_frozen", "evolved_grpo_minus_frozen_builder"):
        c = evo["paired"][name]
        assert PAIRED_KEYS <= set(c) and c["n"] == res["questions"]["test"]
    assert evo["paired"]["evolved_minus_frozen"]["reference_mean"] == pytest.approx(res["reader_recall"]["grpo"])
    assert evo["paired"]["evolved_minus_frozen"]["mean"] == pytest.approx(evo["reader_recall"]["grpo"])
    assert evo["paired"]["evolved_grpo_minus_frozen_builder"]["reference_mean"] == pytest.approx(
        res["reader_recall"]["builder"]
    )


def test_the_page_renders_each_set_with_its_self_evolution_round(study, tmp_path):
    _, _, res, _ = study
    page = load_study("writer_heldout", "page")
    (tmp_path / "writer_heldout_2wiki.json").write_text(json.dumps(res))
    text = page.render(tmp_path)  # LoCoMo's file absent, the 2Wiki one present
    assert "Not measured yet: `python scripts/studies/writer_heldout/run.py experiment=writer_heldout_locomo`" in text
    assert "## 2WikiMultiHopQA passages" in text and "### Self-evolution: the reader recalibrated" in text
    evo = res["self_evolution"]["paired"]["evolved_minus_frozen"]
    assert f"{evo['mean_diff']:+.4f}" in text
    # the share of GRPO groups without reward variance, as TRL logged it per step
    zero = [c["frac_reward_zero_std"] for c in res["grpo"]["curve"]]
    assert len(zero) == res["writer"]["max_steps"]
    assert f"{sum(zero) / len(zero):.0%} of the groups on average had one reward" in text
    res["self_evolution"] = None
    (tmp_path / "writer_heldout_2wiki.json").write_text(json.dumps(res))
    assert "Not in this results file (`self_evolution=false`" in page.render(tmp_path)


def test_link_check_compares_silver_triples_linked_and_not_on_the_validation_graphs(study, tmp_path):
    from graphmem.builders import GraphConfig, make_entity_extractor
    from graphmem.eval.metrics import in_overall
    from rl.writer.format import parse_triples
    from rl.writer.grpo import graph_windows, rewrite_entity_edges
    from rl.writer.sft import silver_triples

    root, gs_dir, res, _ = study
    out = tmp_path / "link.json"
    overrides = ["experiment=writer_heldout_smoke", f"graphset={gs_dir}", f"link_results={out}", f"out_dir={tmp_path}"]
    cfg = compose("writer_heldout", overrides)
    got = load_study("writer_heldout", "link_check").run(cfg)
    assert json.loads(out.read_text()) == json.loads(json.dumps(got))
    assert got["graphs"] == res["split"]["val"] and got["questions"] >= 2
    # the linked arm's edges are the silver triples' entities linked by mention, under the builder's caps
    gs = GraphSet.load(gs_dir)
    gcfg, extractor = GraphConfig(**gs.provenance["graph"]), make_entity_extractor(cfg.graph.entity_extractor)
    counts = {"silver": 0, "silver_linked": 0}
    for name in got["graphs"]:
        graph, triples = gs.graphs[name], []
        for w in graph_windows(graph, cfg.writer.fragments_per_task, name):
            triples += parse_triples(
                silver_triples(w, extractor, cfg.sft.max_entities, cfg.sft.max_lines), w.fragment_ids
            )[0]
        for arm, link in (("silver", False), ("silver_linked", True)):
            g = rewrite_entity_edges(graph, triples, gcfg, link=link)
            counts[arm] += int((g.edge_type == g.relations.index("entity")).sum())
    assert {k: got["entity_edges"][k] for k in counts} == counts and got["entity_edges"]["none"] == 0
    for name, c in got["paired"].items():
        a, b = name.split("_minus_")
        assert c["n"] == got["questions"] and c["mean_diff"] == pytest.approx(
            got["reader_recall"][a] - got["reader_recall"][b]
        )
    # the questions with two or more gold turns, split by whether one window of 4 holds them all
    where = {}
    for q in gs.questions:
        ids = gs.graphs[q.graph].node_ids if q.graph in got["graphs"] else []
        rows = [ids.index(e) for e in q.evidence if e in ids]
        if len(rows) >= 2 and in_overall(q.category):
            where[q.qid] = len({r // 4 for r in rows}) == 1
    groups = got["by_window"]
    assert groups["one_window"]["questions"] + groups["across_windows"]["questions"] == len(where) > 0
    assert groups["one_window"]["questions"] == sum(where.values())
    for g in groups.values():
        c = g["builder_minus_none"]
        assert c is None or c["n"] == g["questions"]
    page = load_study("writer_heldout", "page")
    (tmp_path / "writer_heldout.json").write_text(json.dumps(res))
    (tmp_path / "writer_link_check_locomo.json").write_text(json.dumps(got))
    text = page.render(tmp_path)
    assert "### Entity linking, checked on the validation graphs" in text
    assert f"{got['reader_recall']['silver_linked']:.4f}" in text
    assert "in different windows: builder − none" in text
    assert got["shown_only"] is False and "the text the prompt shows" not in text
    # with sft.shown_only the silver entities come from the shown text, and the page says so
    shown = load_study("writer_heldout", "link_check").run(
        compose("writer_heldout", [*overrides, "sft.shown_only=true"])
    )
    assert shown["shown_only"] is True and shown["graphs"] == got["graphs"]
    (tmp_path / "writer_link_check_locomo.json").write_text(json.dumps(shown))
    assert "their entities taken from the text the prompt shows" in page.render(tmp_path)


def test_reward_candidates_are_chosen_on_the_validation_graphs(tmp_path):
    gs_dir = saved_locomo_set(tmp_path, limit=3)
    cfg = smoke_config(tmp_path, gs_dir, "select.json", "reward_candidates=[{},{beta:0.0}]", "self_evolution=false")
    res = json.loads(json.dumps(load_study("writer_heldout", "run").run(cfg)))
    sel = res["selection"]
    assert sel["val"] == res["split"]["val"] and 0.0 <= sel["sft_val_recall"] <= 1.0
    rows = sel["candidates"]
    assert [r["overrides"] for r in rows] == [{}, {"beta": 0.0}]
    recalls = [r["val_recall"] for r in rows]
    assert sel["selected"] == recalls.index(max(recalls))  # the best validation recall, the first on a tie
    for r in rows:
        assert r["val_minus_sft"]["reference_mean"] == pytest.approx(sel["sft_val_recall"])
        assert r["val_minus_sft"]["mean"] == pytest.approx(r["val_recall"])
        assert r["grpo"]["generation_failures"]["completions"] == 4 * 2  # batch 4, two steps
        assert set(r["grpo"]["weight_change"]) == {"relative_l2", "max_abs", "changed", "tensors"}
    beta = rows[sel["selected"]]["overrides"].get("beta", 1.0)
    assert res["writer"]["beta"] == beta and res["writer"]["output_dir"].endswith(f"candidate_{sel['selected']}")
    # both arms' held-out task reward is the selected candidate's trained task part
    lam = res["writer"]["lambda_rep"]
    for arm in ("sft", "grpo"):
        p = res["task_reward"]["parts"][arm]
        assert p["r_task"] == pytest.approx((p["r_rec"] + beta * p["r_pre"]) / (1.0 + beta))
        assert p["task"] == pytest.approx(p["r_task"] - lam * p["rho_rep"])


def test_every_reward_candidate_trains_its_own_copy_of_the_sft_writer(tmp_path, monkeypatch):
    """Under a reward that varies within a group (completion length), GRPO moves each candidate's weights, and two
    identical candidates move them identically: the second starts from the SFT writer, not from the first's result."""
    import rl.writer.grpo as grpo

    score = grpo.ReaderReward.task_reward

    def task_reward(self, prompts, completions, task_id, **kw):
        score(self, prompts, completions, task_id, **kw)  # keeps the per-completion records
        return [len(grpo._text(c)) / 10 for c in completions]

    monkeypatch.setattr(grpo.ReaderReward, "task_reward", task_reward)
    gs_dir = saved_locomo_set(tmp_path, limit=3)
    overrides = ("reward_candidates=[{},{}]", "self_evolution=false", "writer.learning_rate=0.01")
    res = load_study("writer_heldout", "run").run(smoke_config(tmp_path, gs_dir, "twins.json", *overrides))
    first, second = (r["grpo"]["weight_change"] for r in res["selection"]["candidates"])
    assert first["changed"] == first["tensors"] > 0 and first["relative_l2"] > 0 and first["max_abs"] > 0
    assert second == first
    page = load_study("writer_heldout", "page")
    (tmp_path / "writer_heldout_2wiki_select.json").write_text(json.dumps(res))
    text = page.render(tmp_path)
    assert "### The GRPO candidates, chosen on the validation graphs" in text and f"{first['relative_l2']:.2e}" in text
    caution = "**The GRPO candidates of this run were trained from deep copies of the SFT writer**"
    assert res["candidate_copies"] == "trainable_copy" and caution not in text
    (tmp_path / "writer_heldout_2wiki_select.json").write_text(json.dumps({**res, "candidate_copies": None}))
    assert caution in page.render(tmp_path)  # a run from before trainable_copy carries the caution
    scored = "both scored with the selected writer's reward (beta=0.0)"
    assert scored not in text  # both candidates are the experiment's own reward
    cands = [
        r if i != res["selection"]["selected"] else {**r, "overrides": {"beta": 0.0}}
        for i, r in enumerate(res["selection"]["candidates"])
    ]
    picked = {**res, "selection": {**res["selection"], "candidates": cands}}
    (tmp_path / "writer_heldout_2wiki_select.json").write_text(json.dumps(picked))
    assert scored in page.render(tmp_path)


def test_the_whole_graph_reward_runs_the_study_and_scores_held_out_windows_on_their_graphs(tmp_path):
    gs_dir = saved_locomo_set(tmp_path, limit=3)
    overrides = ("writer.reward_graph=whole", "writer.min_gold=1", "self_evolution=false")
    res = load_study("writer_heldout", "run").run(smoke_config(tmp_path, gs_dir, "whole.json", *overrides))
    assert res["writer"]["reward_graph"] == "whole"
    assert [c["step"] for c in res["grpo"]["curve"]] == [1, 2]
    gs = GraphSet.load(gs_dir)
    gold = {e for q in gs.questions if q.graph in res["split"]["test"] for e in q.evidence}
    rows = [gs.graphs[n].node_ids for n in res["split"]["test"]]
    windows = [set(ids[lo : lo + 4]) for ids in rows for lo in range(0, len(ids), 4)]
    # every test window holding a gold turn is a held-out task, each scored for both writers
    assert res["questions"]["test_tasks"] == sum(bool(w & gold) for w in windows) >= 2
    assert res["task_reward"]["paired"]["n"] == res["questions"]["test_tasks"]


def test_a_reward_candidate_may_not_change_the_held_out_tasks(tmp_path):
    gs_dir = saved_locomo_set(tmp_path, limit=3)
    cfg = smoke_config(tmp_path, gs_dir, "bad.json", "reward_candidates=[{},{min_gold:2}]")
    with pytest.raises(ValueError, match="reward_candidates: min_gold define the held-out tasks"):
        load_study("writer_heldout", "run").run(cfg)
    assert not (tmp_path / "bad.json").exists()
