"""A set folder holds one source: default folders name it, another source is refused unless force=true."""

import json

from graphmem.builders import DataConfig, GraphConfig, graphset_dir
from graphmem.store.graphset import GraphSet
from graphmem.store.setstore import keep_aside
from tests.one_line_errors import error_line, run_script
from tests.small_sets import saved_locomo_set

TRAIN_FILE = "hotpotqa/hotpot_train_100.jsonl"


def test_default_folders_tell_data_files_and_settings_apart():
    hashing = GraphConfig(encoder="hashing")
    assert graphset_dir("o", DataConfig(name="locomo"), GraphConfig()).name == "locomo"
    assert graphset_dir("o", DataConfig(name="hotpotqa", limit=6), hashing).name == "hotpotqa-limit6-hashing"
    names = {
        graphset_dir("o", DataConfig(name="hotpotqa", limit=6), graph).name
        for graph in (
            hashing,
            GraphConfig(encoder="hashing", features="onehot"),
            GraphConfig(encoder="hashing", semantic_k=3),
        )
    }
    names |= {graphset_dir("o", DataConfig(name="hotpotqa", limit=6, file=TRAIN_FILE), hashing).name}
    assert len(names) == 4 and all(n.startswith("hotpotqa-limit6-hashing") for n in names)
    # paths and bookkeeping are not the source: the same folder
    same = DataConfig(name="hotpotqa", limit=6, root="/elsewhere", file="hotpotqa/hotpot_dev_distractor_200.jsonl")
    assert graphset_dir("o", same, GraphConfig(encoder="hashing", cache_dir="/c")).name == "hotpotqa-limit6-hashing"


def _build(tmp_path, *overrides):
    return run_script(
        "build_graph.py",
        "data=hotpotqa",
        "data.limit=2",
        "graph.encoder=hashing",
        "plot=false",
        "progress=false",
        f"graph.cache_dir={tmp_path / 'cache'}",
        f"out_dir={tmp_path / 'run'}",
        f"graphset={tmp_path / 'set'}",
        *overrides,
        tmp_path=tmp_path,
    )


def test_a_build_from_another_data_file_is_refused_unless_forced(tmp_path):
    folder = tmp_path / "set"
    assert _build(tmp_path).returncode == 0
    manifest = (folder / "manifest.json").read_bytes()
    line = error_line(_build(tmp_path, f"data.file={TRAIN_FILE}"))
    assert line.startswith(f"error: {folder} holds the graph set built from data.file=")
    assert f"this build asks for data.file='{TRAIN_FILE}'" in line and "force=true replaces it" in line
    assert (folder / "manifest.json").read_bytes() == manifest and not list(folder.glob("replaced-*"))
    forced_but_refused = _build(tmp_path, f"data.file={TRAIN_FILE}", "force=true", "plot=true", "plot_graph=nope")
    assert "plot_graph='nope' is not a graph of this set" in error_line(forced_but_refused)
    assert (folder / "manifest.json").read_bytes() == manifest and not list(folder.glob("replaced-*"))

    proc = _build(tmp_path, f"data.file={TRAIN_FILE}", "force=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (kept,) = folder.glob("replaced-*")
    old = json.loads(manifest)["config_hash"]
    assert kept.name == f"replaced-{old[:12]}" and GraphSet.load(kept).config_hash == old
    assert GraphSet.load(folder).provenance["data"]["file"] == TRAIN_FILE


def test_a_set_kept_aside_never_lands_on_an_earlier_one_and_is_kept_once(tmp_path):
    folder = saved_locomo_set(tmp_path, limit=1)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "replaced-x").mkdir()
    (folder / "replaced-x" / "manifest.json").write_text('{"content_sha256": "another set"}')  # an earlier one
    first = keep_aside(folder, manifest, "replaced-x")
    again = keep_aside(folder, manifest, "replaced-x")  # the same set, as a forced build killed before its commit
    assert first.name == again.name == "replaced-x-2" and sorted(p.name for p in folder.glob("replaced-*")) == [
        "replaced-x",
        "replaced-x-2",
    ]
    assert GraphSet.load(first).config_hash == manifest["config_hash"]
