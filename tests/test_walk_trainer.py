"""The walk trainer (rl/walk/trainer.py): it learns the bridge task of graphs it never saw, with each
objective; same seed, same run; a resumed run equals an uninterrupted one; configs are checked."""

from __future__ import annotations

import pytest
import torch

from graphmem.builders.synthetic import make_bridge_graph
from graphmem.core import Budget
from graphmem.datasets.types import Question
from graphmem.policies.walk import walk
from rl.walk.data import walk_data
from rl.walk.trainer import TrainConfig, WalkTrainer

BUDGET = Budget(max_entries=1, top_k_neighbors=2, max_hops=2, max_nodes=3)


def bridge_set(seeds):
    graphs, questions, emb = {}, [], []
    for s in seeds:
        graph, queries, gold = make_bridge_graph(num_queries=8, seed=s, dim=32)
        name = f"bridge{s}"
        graph.info["name"] = name
        graphs[name] = graph
        for q, g in zip(queries, gold):
            questions.append(Question(f"{name}#{q.qid}", name, q.text, None, (graph.node_ids[g],), 1))
            emb.append(q.embedding)
    return graphs, questions, torch.stack(emb)


def config(**parts) -> TrainConfig:
    base = {
        "model": {"rank": 0, "stop": False},
        "objective": {"imitation_epochs": 2, "rl_epochs": 2, "temperature": 0.5},
        "optim": {"lr": 2e-2, "rl_lr": 1e-2, "batch_size": 4},
        "run": {"device": "cpu"},
    }
    for key, value in parts.items():
        base[key] = {**base[key], **value}
    return TrainConfig.from_mapping(base)


def trainer(cfg: TrainConfig, seeds=(0, 1)) -> WalkTrainer:
    graphs, questions, emb = bridge_set(seeds)
    val_graphs, val_q, val_emb = bridge_set((7,))
    return WalkTrainer(cfg, {**graphs, **val_graphs}, questions, emb, val_q, val_emb, budget=BUDGET)


def unseen_recall(scorer) -> float:
    graphs, questions, emb = bridge_set((11, 12))
    d = walk_data(graphs, questions, emb, BUDGET)
    ep = walk(d.tables, scorer, d.q, d.entries, BUDGET, lexical=d.lexical)
    return float(((ep.loaded[:, :, None] == d.gold[:, None, :]).any(1).sum(1) / (d.gold >= 0).sum(1)).mean())


@pytest.mark.parametrize(
    "objective",
    [
        {"imitation_epochs": 3, "rl_epochs": 0},
        {"imitation_epochs": 0, "rl_epochs": 6, "temperature": 1.0},
        {"imitation_epochs": 0, "rl_epochs": 4, "rl": "hage_mdp", "temperature": 1.0, "mdp": {"max_hops": 3}},
    ],
    ids=["imitation", "reinforce", "hage_mdp"],
)
def test_trainer_learns_the_bridge_of_unseen_graphs(objective):
    cfg = config(objective=objective)
    t = trainer(cfg)
    assert unseen_recall(t.scorer) == 0.0  # the cosine walk never crosses the bridge
    result = t.learn()
    assert unseen_recall(result.scorer) >= 0.9
    assert result.best_score >= 0.9  # validation graph
    assert [r["phase"] for r in result.history] == [cfg.phases()[0][0]] * cfg.phases()[0][1]


def test_sl_then_rl_keeps_an_rl_epoch():
    result = trainer(config()).learn()
    assert [r["phase"] for r in result.history] == ["imitation"] * 2 + ["reinforce"] * 2
    assert result.best_phase == "reinforce"


def test_same_seed_same_run_and_resume_equals_uninterrupted(tmp_path):
    a = trainer(config(run={"checkpoint_dir": str(tmp_path / "a")})).learn()
    b = trainer(config(run={"checkpoint_dir": str(tmp_path / "b")})).learn()
    for (name, x), y in zip(a.scorer.state_dict().items(), b.scorer.state_dict().values()):
        assert torch.equal(x, y), name
    assert [r["val_return"] for r in a.history] == [r["val_return"] for r in b.history]
    # stop after the first RL epoch, then resume from last.pt
    short = config(objective={"rl_epochs": 1}, run={"checkpoint_dir": str(tmp_path / "c")})
    trainer(short).learn()
    resumed = trainer(config(run={"checkpoint_dir": str(tmp_path / "c"), "resume": True})).learn()
    for (name, x), y in zip(a.scorer.state_dict().items(), resumed.scorer.state_dict().values()):
        assert torch.equal(x, y), name
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in a.history]


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="unknown parts"):
        TrainConfig.from_mapping({"trainer": {}})
    with pytest.raises(ValueError, match=r"trainer.optim: unknown keys \['lr_router'\]"):
        TrainConfig.from_mapping({"optim": {"lr_router": 1.0}})
    with pytest.raises(ValueError, match="OptimConfig.batch_size must be > 0"):
        TrainConfig.from_mapping({"optim": {"batch_size": 0}})
    with pytest.raises(ValueError, match="ObjectiveConfig.rl must be one of"):
        TrainConfig.from_mapping({"objective": {"rl": "ppo"}})
    with pytest.raises(TypeError):
        TrainConfig.from_mapping({"objective": {"mdp": {"horizon": 3}}})


def test_trainer_yaml_mirrors_train_config():
    """configs/trainer/default.yaml holds every field of every part, at its dataclass default."""
    import dataclasses
    from pathlib import Path

    from omegaconf import OmegaConf

    yaml = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs" / "trainer" / "default.yaml"))
    assert yaml.pop("defaults") == ["schema", "_self_"]  # typed by TrainConfig (graphmem/config/schemas.py)
    defaults = TrainConfig()
    assert set(yaml) == {f.name for f in dataclasses.fields(TrainConfig)}
    for part, values in yaml.items():
        expected = dataclasses.asdict(getattr(defaults, part))
        expected.pop("dim", None)  # the embedding size comes from the graphs
        assert values == expected, part
