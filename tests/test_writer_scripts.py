"""The writer's scripts end to end on a small real LoCoMo set: ``train_writer.py`` (warm start, GRPO,
its files and the paired quarter comparison) and ``scripts/studies/self_evolve/run.py`` rebuilding the graphs with the
trained writer under the builder's fan-out caps."""

import json

import pytest
import torch

from graphmem.store.graphset import GraphSet
from models.gnn_reader import GNNReader
from rl.gnn.train import save_checkpoint
from rl.writer.run import moving_mean
from tests.script_loader import compose, load_script, load_study
from tests.small_sets import saved_locomo_set

STEPS, BATCH = 4, 4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One small writer run: graph set, random reader, then ``train_writer.run`` in process."""
    root = tmp_path_factory.mktemp("writer")
    gs_dir = saved_locomo_set(root, limit=5)
    dim = GraphSet.load(gs_dir).query_embeddings.shape[1]
    torch.manual_seed(0)
    reader = save_checkpoint(GNNReader(input_dim=dim, hidden_dim=8), root / "reader.pt")
    common = [
        f"graphset={gs_dir}",
        f"writer.reader_checkpoint={reader}",
        "writer.model=tiny",
        "writer.trainable_layers=null",
        "writer.tiny_hidden=16",
        "writer.tiny_layers=1",
        "writer.fragments_per_task=4",
        "writer.max_fragment_chars=40",
        "writer.max_completion_length=24",
        "threads=1",
        "progress=false",
    ]
    cfg = compose(
        "writer",
        common
        + [
            f"writer.max_steps={STEPS}",
            f"writer.batch_size={BATCH}",
            "writer.num_generations=2",
            f"writer.output_dir={root / 'trl'}",
            "sft.max_steps=2",
            "sft.eval_tasks=2",
            "sft_tasks=8",
            "max_tasks=4",
            f"save_model={root / 'model'}",
            f"out_dir={root / 'run'}",
        ],
    )
    load_script("train_writer").run(cfg)
    return root, gs_dir, common


def test_train_writer_writes_curve_completions_and_paired_quarters(trained):
    root, _, _ = trained
    run = root / "run"
    results = json.loads((run / "results.json").read_text())
    rows = [json.loads(line) for line in (run / "completion_rewards.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [s for s in range(1, STEPS + 1) for _ in range(BATCH)]
    curve = json.loads((run / "reward_curve.json").read_text())
    assert [c["step"] for c in curve] == list(range(1, STEPS + 1)) == [c["step"] for c in results["curve"]]
    for c in curve:  # the logged step means are the means of the recorded completions
        mean = sum(r["task"] for r in rows if r["step"] == c["step"]) / BATCH
        assert mean == pytest.approx(c["rewards/task_reward/mean"], abs=1e-6)
    quarters = results["quarters_by_task"]
    assert set(quarters) == {"reward", "task", "format", "well_formed"}
    for part in quarters.values():  # step 1 vs step 4 over the tasks drawn in both, or none
        assert part is None or (part["n"] >= 2 and part["ci_low"] <= part["mean_diff"] <= part["ci_high"])
    assert results["warm_start"]["eval_tasks"] == 2 and (run / "reward_curve.png").stat().st_size > 0
    assert (root / "model" / "config.json").is_file()


def test_self_evolve_rebuilds_with_the_trained_writer_under_the_fanout_caps(trained):
    root, gs_dir, common = trained
    cfg = compose(
        "self_evolve",
        common
        + [
            f"writer.model={root / 'model'}",
            "writer.max_steps=0",
            "train.epochs=1",
            "train.hidden_dim=8",
            "rebuild_batch=32",
            f"out_dir={root / 'evolve'}",
        ],
    )
    load_study("self_evolve", "run").run(cfg)
    [rnd] = json.loads((root / "evolve" / "rounds.json").read_text())["rounds"]
    assert rnd["triples_written"] >= 0 and rnd["entity_edges_before"] > 0
    # the bound of the builder's rule: per entity mention at most ``entity_fanout`` pairs, both directions
    gs = GraphSet.load(gs_dir)
    fanout = gs.provenance["graph"]["entity_fanout"]
    assert rnd["entity_edges_after"] <= 2 * fanout * 2 * rnd["triples_written"]
    for key in (
        "test_recall_start_graphs",
        "test_recall_rebuilt_before_finetune",
        "test_recall_rebuilt_after_finetune",
    ):
        assert 0.0 <= rnd[key] <= 1.0
    assert (root / "evolve" / "reader_round0.pt").is_file()


def test_reward_curve_moving_mean():
    assert moving_mean([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
