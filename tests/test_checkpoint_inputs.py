"""Checkpoints know their inputs: encoder, embedding size, graph set and training split (graphmem.store.checkpoint)."""

import logging
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from script_loader import load_script

import rl.walk  # noqa: F401  (adds the trainer schema before Hydra composes train)
from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.index.embed import HashingEncoder
from graphmem.policies.gnn import GNNPolicy
from graphmem.policies.router import RouterPolicy
from graphmem.store.checkpoint import CheckpointError, check_inputs, check_policies
from graphmem.store.encoder_cache import CachedEncoder
from graphmem.store.graphset import GraphSet
from models.gnn_reader import GNNReader, ReaderConfig
from rl.gnn.train import save_checkpoint as save_reader
from tests.one_line_errors import error_line, run_script

ROOT = Path(__file__).resolve().parents[1]
DATA = DataConfig(name="hotpotqa", limit=6)


class _OtherEncoder:
    """Another 384-d encoder: the hashing rows under a fixed rotation (same width, other geometry)."""

    name, dim = "other-encoder-384", 384

    def encode(self, texts):
        rows = HashingEncoder(384).encode(texts)
        return torch.roll(rows, 7, dims=1)


def _set(tmp, name, encoder):
    gs = build_graphset(
        DATA, GraphConfig(encoder="hashing"), encoder=CachedEncoder(encoder, tmp / "cache"), progress=False
    )
    return GraphSet.load(gs.save(tmp / name))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    sets = {
        "minilm_like": _set(tmp, "a", HashingEncoder(384)),
        "other_384": _set(tmp, "b", _OtherEncoder()),
        "dim_128": _set(tmp, "c", HashingEncoder(128)),
    }
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                f"graphset={tmp / 'a'}",
                "data=hotpotqa",
                "cv.k=3",
                "cv.folds=[0]",
                "trainer.objective.imitation_epochs=1",
                "trainer.objective.rl_epochs=1",
                "trainer.run.device=cpu",
                "baselines=[dense_topk]",
                "stats.n_boot=200",
                f"out_dir={tmp / 'out'}",
                "graph.encoder=hashing",
                "logger=none",
                "progress=false",
            ],
        )
    payload = load_script("train").run(cfg)
    return tmp, sets, payload, tmp / "out" / "fold0" / "router" / "best.pt"


def test_a_router_checkpoint_records_its_inputs(trained):
    tmp, sets, payload, best = trained
    inputs = torch.load(best, weights_only=True)["inputs"]
    split = payload["splits"][0]
    assert inputs["embedding_dim"] == 384 and inputs["encoder"] == "hashing-bow-384"
    assert inputs["encoder_fingerprint"] == sets["minilm_like"].provenance["encoder_fingerprint"]
    assert inputs["graphset_config_hash"] == sets["minilm_like"].config_hash
    assert inputs["train_graphs"] == sorted(split["train"]) and inputs["val_graphs"] == sorted(split["val"])


@pytest.mark.parametrize(
    "other, message", [("other_384", "trained on embeddings of hashing-bow-384"), ("dim_128", "trained on 384-d")]
)
def test_a_router_on_a_set_of_another_encoder_or_size_is_refused(trained, other, message):
    tmp, sets, _, best = trained
    policy = RouterPolicy(checkpoint=best, device="cpu")
    with pytest.raises(CheckpointError, match=message) as err:
        check_policies({"router": policy}, sets[other])
    assert "\n" not in str(err.value) and str(best) in str(err.value)


def test_evaluating_on_training_graphs_warns_or_refuses_under_strict_split(trained, caplog):
    tmp, sets, payload, best = trained
    with caplog.at_level(logging.WARNING, logger="graphmem.store.checkpoint"):
        check_policies({"router": RouterPolicy(checkpoint=best, device="cpu")}, sets["minilm_like"])
    assert "were used to train or select the checkpoint" in caplog.text
    held_out = sets["minilm_like"]
    test_only = {n: held_out.graphs[n] for n in payload["splits"][0]["test"]}
    caplog.clear()
    from dataclasses import replace

    keep = [i for i, q in enumerate(held_out.questions) if q.graph in test_only]
    view = replace(
        held_out,
        graphs=test_only,
        questions=[held_out.questions[i] for i in keep],
        query_embeddings=held_out.query_embeddings[keep],
    )
    with caplog.at_level(logging.WARNING, logger="graphmem.store.checkpoint"):
        check_policies({"router": RouterPolicy(checkpoint=best, device="cpu", strict_split=True)}, view)
    assert "train or select" not in caplog.text  # the test graphs alone: nothing to say
    with pytest.raises(CheckpointError, match=r"policy.strict_split=true"):
        check_policies({"router": RouterPolicy(checkpoint=best, device="cpu", strict_split=True)}, held_out)


def test_a_gnn_checkpoint_records_and_checks_its_inputs(trained):
    tmp, sets, _, _ = trained
    from graphmem.store.checkpoint import checkpoint_inputs

    graphs = sorted(sets["minilm_like"].graphs)
    reader = GNNReader(ReaderConfig(input_dim=384, hidden_dim=16))
    path = save_reader(reader, tmp / "gnn.pt", inputs=checkpoint_inputs(sets["minilm_like"], graphs[:3], graphs[3:4]))
    policy = GNNPolicy(checkpoint=path)
    assert policy.trained_inputs["train_graphs"] == graphs[:3]
    with pytest.raises(CheckpointError, match="trained on 384-d"):
        check_policies({"gnn": policy}, sets["dim_128"])
    with pytest.raises(CheckpointError, match="fingerprint"):
        check_policies({"gnn": policy}, sets["other_384"])


@pytest.mark.parametrize("policy", ["router", "gnn"])
def test_a_missing_checkpoint_is_one_error_line_naming_the_key_and_path(tmp_path, policy):
    missing = tmp_path / "nope.pt"
    proc = run_script(
        "evaluate.py",
        f"policy={policy}",
        f"policy.checkpoint={missing}",
        f"out_dir={tmp_path / 'o'}",
        tmp_path=tmp_path,
    )
    assert f"policy.checkpoint='{missing}': no such checkpoint file" in error_line(proc)


def test_evaluate_refuses_a_router_on_a_128d_set_in_one_line(trained, tmp_path):
    tmp, _, _, best = trained
    proc = run_script(
        "evaluate.py",
        f"graphset={tmp / 'c'}", "policy=router", f"policy.checkpoint={best}", "graph.encoder=hashing",
        f"out_dir={tmp_path / 'o'}", tmp_path=tmp_path,
    )  # fmt: skip
    assert "trained on 384-d embeddings" in error_line(proc)


def test_strict_split_refuses_a_checkpoint_that_records_no_inputs(tmp_path):
    path = tmp_path / "old.pt"
    assert "unchecked" in check_inputs(path, None, graphset=None)[0]
    with pytest.raises(CheckpointError, match=r"old.pt: the checkpoint records no inputs .*policy.strict_split=true"):
        check_inputs(path, None, graphset=None, strict_split=True)
