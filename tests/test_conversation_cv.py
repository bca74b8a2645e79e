"""Cross-validation over two conversational sources (``cv_sets``): each source's conversations spread over every fold
and split as they would be alone, a variant restricted to one source (``sources``) trains and validates on it only
and is tested on both, results are reported per source; a conversation set is accepted by ``train_sets`` too."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from script_loader import load_script

from graphmem.builders.pipeline import train_sources
from rl.common.splits import conversation_folds, source_folds
from rl.walk import folds

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
QUICK = [
    "graph.encoder=hashing",
    "logger=none",
    "progress=false",
    "data.limit=3",
    "cv.k=3",
    "cv.folds=[0]",
    "trainer.objective.imitation_epochs=1",
    "trainer.objective.rl_epochs=0",
    "trainer.run.device=cpu",
    "baselines=[hybrid]",
    "stats.n_boot=200",
]


def test_each_source_is_split_as_it_would_be_alone():
    sources = {"a": [f"a{i}" for i in range(8)], "b": [f"b{i}" for i in range(7)]}
    joined = source_folds(sources, k=5, seed=0, val_fraction=0.2)
    alone = {s: conversation_folds(names, k=5, seed=0, val_fraction=0.2) for s, names in sources.items()}
    for i, split in enumerate(joined):
        for part in ("train", "val", "test"):
            assert set(getattr(split, part)) == {n for s in alone for n in getattr(alone[s][i], part)}
        assert {n[0] for n in split.test} == {"a", "b"}  # both sources in every test part
    assert source_folds({"a": sources["a"]}, k=5) == conversation_folds(sources["a"], k=5)
    with pytest.raises(ValueError, match="source 'b'"):
        source_folds({"a": sources["a"], "b": ["b0", "b1"]}, k=3)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conversations")
    module = load_script("train")
    seen = {}

    class Recording(folds.WalkTrainer):
        def __init__(self, cfg, graphs, questions, embeddings, val_questions, *rest, **kw):
            name = Path(cfg.run.checkpoint_dir).name
            seen[name] = ({q.graph for q in questions}, {q.graph for q in val_questions})
            super().__init__(cfg, graphs, questions, embeddings, val_questions, *rest, **kw)

    over = ["+experiment=conversations", "cv_sets=[{name: realtalk, limit: 3}]", f"graphset_dir={tmp / 'sets'}"]
    over += ["+variants.realtalk_only={sources: [realtalk]}", f"out_dir={tmp / 'out'}", *QUICK]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="train", overrides=over)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(folds, "WalkTrainer", Recording)
        payload = module.run(cfg)
    return payload, seen, tmp / "out"


def test_both_sources_are_cross_validated_and_reported_apart(run):
    payload, seen, _ = run
    (split,) = payload["splits"]
    test = set(split["test"])
    assert any(n.startswith("conv-") for n in test) and any(n.startswith("Chat_") for n in test)
    assert payload["dataset"] == "locomo+realtalk" and payload["cv_sets"][0]["name"] == "realtalk"
    train, val = seen["router"]
    assert {g[:4] for g in train} == {"conv", "Chat"} and {g[:4] for g in val} == {"conv", "Chat"}
    train, val = seen["realtalk_only"]  # one source: trained and selected on REALTALK's conversations only
    assert all(g.startswith("Chat_") for g in train | val) and train and val
    by_source = payload["by_source"]
    assert set(by_source) == {"locomo", "realtalk"}
    for source, part in by_source.items():
        assert set(part["questions"]) == {"router", "realtalk_only", "hybrid"}
        assert part["means"]["router"]["passage_recall_5"] is not None  # R@5 of a conversation: turns
        assert {c["policy"] for c in part["paired"] if c["reference"] == "hybrid"} == {"router", "realtalk_only"}
    n = sum(part["questions"]["router"] for part in by_source.values())  # LoCoMo's adversarial category apart
    assert 0 < n <= payload["questions"]["router"]


def test_a_merge_of_the_run_keeps_each_source_apart(run):
    payload, _, out = run
    merged = load_script("results").merge([out], also=[], n_boot=100)
    assert set(merged["by_source"]) == {"locomo", "realtalk"} and merged["cv_sets"] == payload["cv_sets"]
    assert merged["by_source"]["realtalk"]["questions"] == payload["by_source"]["realtalk"]["questions"]


def test_conversation_sets_as_training_only_or_cross_validated_sets():
    (src,) = train_sources({"name": "locomo"}, [{"name": "realtalk"}])
    assert src.key == "train_sets[0]" and src.data.name == "realtalk" and src.data.file == "realtalk"
    (src,) = train_sources({"name": "locomo"}, cv_sets=[{"name": "realtalk"}], train_files=False)
    assert src.key == "cv_sets[0]"
    with pytest.raises(ValueError, match=r"train_sets\[0\] .* and cv_sets\[0\] .* both read"):
        train_sources({"name": "locomo"}, [{"name": "realtalk"}], cv_sets=[{"name": "realtalk"}])
    with pytest.raises(ValueError, match=r"^cv_sets\[0\]\.name: missing"):
        train_sources({"name": "locomo"}, cv_sets=[{"file": "realtalk"}])
