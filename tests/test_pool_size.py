"""``data.pool_size``: a pooled file cut into pooled graphs of consecutive record groups; the whole-file default
(graph name, config hash, set folder) as before."""

import hashlib
import json
from dataclasses import asdict

import pytest

from graphmem.builders import DataConfig, GraphConfig, build_graphset, config_hash, graphset_dir
from graphmem.builders.pipeline import BUILDER_VERSION
from graphmem.builders.registry import REGISTRY, load_units
from graphmem.builders.units import pooled_name
from graphmem.datasets import data_file
from graphmem.index.embed import HashingEncoder

FILES = {
    "hotpotqa": "hotpotqa/hotpot_dev_distractor_200.jsonl",
    "musique": "musique/musique_ans_50.json",
    "2wiki": "2wikimultihopqa/2wiki_train_500.json",
}


def _seven(tmp_path, kind):
    """The first 7 records of the dataset's real file, as a JSON list."""
    records = REGISTRY[kind].load(data_file(FILES[kind]))[0][:7]
    source = data_file(FILES[kind]).read_text()
    raw = json.loads(source) if source.lstrip().startswith("[") else [json.loads(x) for x in source.splitlines()]
    path = tmp_path / f"seven_{kind}.json"
    path.write_text(json.dumps(raw[:7]))
    return path, [r.qid for r in records], [{p.title for p in r.paragraphs} for r in records]


@pytest.mark.parametrize("kind", sorted(FILES))
def test_seven_records_in_pools_of_three(tmp_path, kind):
    path, qids, titles = _seven(tmp_path, kind)
    cfg = GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "cache"))
    data = DataConfig(name=kind, file=str(path), pooled=True, pool_size=3)
    gs = build_graphset(data, cfg, encoder=HashingEncoder(), progress=False)
    names = [pooled_name(path, k) for k in range(3)]
    assert list(gs.graphs) == names == [f"pooled:seven_{kind}:{k}" for k in range(3)]
    groups = [range(0, 3), range(3, 6), range(6, 7)]
    for name, group in zip(names, groups):
        g = gs.graphs[name]
        passages = {m["title"] for m in g.metadata if m["kind"] == "passage"}
        assert passages == set().union(*(titles[i] for i in group))  # every passage of the group, no other
        assert g.info["pooled"] and g.info["corpus"] == name
    assert [q.qid for q in gs.questions] == qids
    assert [q.graph for q in gs.questions] == [names[i // 3] for i in range(7)]
    for q in gs.questions:
        g = gs.graphs[q.graph]
        assert q.evidence and all(g.has_node(e) for e in q.evidence)
        assert all(g.has_node(c) for c in q.support_chain)


def test_pool_size_with_limit_and_one_group(tmp_path):
    cfg = GraphConfig(encoder="hashing")
    path = data_file(FILES["2wiki"])
    units, questions, _ = load_units("2wiki", path, cfg, pooled=True, limit=5, pool_size=2)
    assert [u.name for u in units] == [pooled_name(path, k) for k in range(3)]
    assert [q.graph for q in questions] == [pooled_name(path, k) for k in (0, 0, 1, 1, 2)]
    (whole,), _, _ = load_units("2wiki", path, cfg, pooled=True, limit=5)
    (one,), _, _ = load_units("2wiki", path, cfg, pooled=True, limit=5, pool_size=5)
    assert whole.name == pooled_name(path) and one.name == pooled_name(path, 0) and one.texts == whole.texts


def test_the_whole_file_default_keeps_its_graph_name_hash_and_folder():
    graph = GraphConfig()
    data = DataConfig(name="hotpotqa", pooled=True)
    units, _, _ = load_units("hotpotqa", data_file(FILES["hotpotqa"]), GraphConfig(encoder="hashing"), pooled=True)
    assert [u.name for u in units] == ["pooled:hotpot_dev_distractor_200"]
    # the hash as computed before pool_size existed: the data keys but root, train_files and pool_size
    old_data = {k: v for k, v in asdict(data).items() if k not in ("root", "train_files", "pool_size")}
    old_graph = {
        k: v
        for k, v in asdict(graph).items()
        if k not in ("cache_dir", "max_text_chars", "sentence_nodes", "duplicate_titles", "incremental")
    }
    blob = json.dumps(
        {"data": old_data, "graph": old_graph, "data_sha256": "s", "builder": BUILDER_VERSION}, sort_keys=True
    )
    assert config_hash(data, graph, "s") == hashlib.sha256(blob.encode()).hexdigest()
    grouped = DataConfig(name="hotpotqa", pooled=True, pool_size=50)
    assert config_hash(grouped, graph, "s") != config_hash(data, graph, "s")
    assert graphset_dir("out", data, graph).name == "hotpotqa-pooled"
    assert graphset_dir("out", grouped, graph).name.startswith("hotpotqa-pooled-")
    assert graphset_dir("out", grouped, graph) != graphset_dir(
        "out", DataConfig(name="hotpotqa", pooled=True, pool_size=51), graph
    )


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "3"])
def test_pool_size_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match="DataConfig.pool_size must be a positive integer"):
        DataConfig(name="musique", pooled=True, pool_size=value)


def test_pool_size_without_pooled_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"DataConfig.pool_size=3 needs DataConfig.pooled=true"):
        DataConfig(name="2wiki", pool_size=3)
    with pytest.raises(ValueError, match="DataConfig.pooled"):
        DataConfig(name="locomo", pooled=True, pool_size=3)
    with pytest.raises(ValueError, match="DataConfig.pool_size"):
        load_units("hotpotqa", data_file(FILES["hotpotqa"]), GraphConfig(encoder="hashing"), pool_size=3)
