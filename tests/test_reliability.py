"""Faults a researcher will meet: crafted graph files, corrupted checkpoints, impossible overrides, secrets.

Each case either gets a clear error naming the file and field, or is rejected before any work.
"""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from graphmem.config.cli import run_or_exit
from graphmem.core.graph import GraphError, MemoryGraph
from graphmem.store.io import SCHEMA_VERSION, _digest, load_graph
from rl.common.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tests import script_runner
from tests.script_loader import compose, load_script

ROOT = Path(__file__).resolve().parents[1]

TRAIN = load_script("train")
FAKE_KEY = "sk-fake-0123456789abcdefSECRET"


def graph() -> MemoryGraph:
    g = MemoryGraph.empty(dim=4)
    g.add_nodes(["a", "b", "c"], ["one", "two", "three"], torch.eye(3, 4))
    g.add_edges([0, 1], [1, 2], "temporal")
    return g


def write_unvalidated(path: Path, g: MemoryGraph, **tensors) -> Path:
    """A file with a correct checksum but content that ``save_graph`` would have refused."""
    names = ("embeddings", "timestamps", "edge_index", "edge_type", "S", "F", "edge_attr", "edge_attr_init")
    body = {n: tensors.get(n, getattr(g, n)).contiguous() for n in names}
    payload = json.dumps(
        {
            "node_ids": g.node_ids,
            "texts": g.texts,
            "keys": g.keys,
            "metadata": g.metadata,
            "relations": list(g.relations),
            "info": g.info,
        }
    )
    save_file(
        body,
        str(path),
        metadata={"schema_version": str(SCHEMA_VERSION), "graphmem": payload, "sha256": _digest(payload, body)},
    )
    return path


@pytest.mark.parametrize(
    "fault, message",
    [
        (
            {"embeddings": torch.tensor([[0.0, float("nan"), 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])},
            r"node 'a': field 'embeddings' holds NaN",
        ),
        ({"embeddings": torch.zeros(3, 4, 2)}, r"field 'embeddings' has shape \(3, 4, 2\)"),
        ({"embeddings": torch.zeros(2, 4)}, r"field 'embeddings' has shape \(2, 4\), expected \[3, D\]"),
        (
            {"edge_index": torch.tensor([[0, 1], [1, 7]])},
            r"edge 1 \(1 -> 7\): field 'edge_index' points to a missing node",
        ),
        ({"S": torch.zeros(5)}, r"field 'S' has shape \(5,\), expected \[2\] for 2 edges"),
        ({"edge_attr": torch.zeros(2, 3)}, r"field 'edge_attr' has shape \(2, 3\)"),
        ({"F": torch.tensor([0.0, -1.0])}, r"edge 1 \('b' -> 'c', temporal\): field 'F' = -1.0"),
    ],
)
def test_crafted_graph_content_is_refused_naming_file_and_field(tmp_path, fault, message):
    path = write_unvalidated(tmp_path / "bad.safetensors", graph(), **fault)
    with pytest.raises(GraphError, match=message) as err:
        load_graph(path)
    assert str(path) in str(err.value)


def test_well_formed_file_written_the_same_way_loads(tmp_path):
    assert load_graph(write_unvalidated(tmp_path / "ok.safetensors", graph())).num_edges == 2


def test_missing_graph_file_says_how_to_make_it(tmp_path):
    with pytest.raises(GraphError, match="build it with scripts/build_graph.py"):
        load_graph(tmp_path / "absent.safetensors")


def test_corrupted_and_foreign_checkpoints_are_refused(tmp_path):
    good = save_checkpoint(tmp_path / "good.pt", "walk", {"scorer": {"w": torch.ones(2)}, "run_id": "abc"})
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(os.urandom(256))
    with pytest.raises(CheckpointError, match="refused to load"):
        load_checkpoint(garbage, "walk")
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="refused to load"):
        load_checkpoint(cut, "walk")
    with pytest.raises(CheckpointError, match="written by run 'abc'"):
        load_checkpoint(good, "walk", run_id="xyz")
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.ones(1)}, str(plain))
    with pytest.raises(CheckpointError, match="not a"):
        load_checkpoint(plain, "walk")


def _env(**extra):
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "WANDB_MODE": "disabled",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        **extra,
    }


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.objective.rl_epochs=-1", "ObjectiveConfig.rl_epochs must be >= 0"),
        ("trainer.optim.batch_size=0", "OptimConfig.batch_size must be > 0"),
        ("trainer.optim.lr=0", "OptimConfig.lr must be > 0"),
        ("trainer.objective.rl=magic", "ObjectiveConfig.rl must be one of"),
        ("trainer.model.edge_mode=magic", "edge encoder mode 'magic' is not one of"),
        ("+trainer.optim.epochs=3", "trainer.optim: unknown keys ['epochs']"),
        ("budget.max_tokens=-5", "Budget.max_tokens must be a non-negative integer"),
        ("baselines=[no_such_policy]", "unknown baseline policy 'no_such_policy'"),
        ("cv.folds=[9]", "cv.folds within [0, 5)"),
        ("train_extra=true", "train_extra=true, but data 'locomo' lists no train_files"),
    ],
)
def test_train_rejects_impossible_overrides_before_any_work(tmp_path, override, message, capsys):
    # the graph set path does not exist: an error about it would mean work had started. In process: the
    # exit status and one-line error of the command line are test_input_errors' (cv.val_fraction=1.5)
    cfg = compose("train", [f"graphset={tmp_path / 'missing'}", "logger=none", f"out_dir={tmp_path / 'out'}", override])
    with pytest.raises(SystemExit) as exited:
        run_or_exit(TRAIN.run, cfg)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_no_written_file_contains_an_api_key(tmp_path):
    """Build, train and evaluate with a fake key in the environment; scan every file written."""
    env = _env(
        OPENAI_API_KEY=FAKE_KEY,
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp_path / "wandb"),
        GRAPHMEM_CACHE_DIR=str(tmp_path / "cache"),
    )
    (tmp_path / "wandb").mkdir()
    common = [
        "data=locomo",
        "data.limit=3",
        "graph.encoder=hashing",
        f"graphset_dir={tmp_path / 'sets'}",
        "progress=false",
    ]
    runs = [
        ["scripts/build_graph.py", *common, "plot=false", f"hydra.run.dir={tmp_path / 'hydra-build'}"],
        [
            "scripts/train.py",
            *common,
            "cv.k=3",
            "cv.folds=[0]",
            "trainer.objective.imitation_epochs=1",
            "trainer.objective.rl_epochs=1",
            "baselines=[dense_topk]",
            f"out_dir={tmp_path / 'train'}",
            f"hydra.run.dir={tmp_path / 'hydra-train'}",
            "+llm=openai",
        ],
        [
            "scripts/evaluate.py",
            *common,
            "policies=[beta_bfs]",
            "sweep_tokens=[]",
            f"out_dir={tmp_path / 'eval'}",
            f"hydra.run.dir={tmp_path / 'hydra-eval'}",
        ],
    ]
    for args in runs:
        proc = script_runner.run([sys.executable, *args], cwd=ROOT, env=env, timeout=300)
        assert proc.returncode == 0, f"{args[0]}: {proc.stderr[-3000:]}"
        assert FAKE_KEY not in proc.stdout + proc.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "config.yaml" for p in written) and any("wandb" in p.parts for p in written)
    leaking = [str(p) for p in written if FAKE_KEY.encode() in p.read_bytes()]
    assert leaking == []
