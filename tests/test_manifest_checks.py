"""The manifest of a graph set is checked like its files: its own checksum, field types, query rows
bound to their questions, and builds that fail before they commit (or fail cleanly on a full disk)."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import graphmem.store.setformat
from graphmem.builders import DataConfig, GraphConfig, reuse_or_build
from graphmem.store.graphset import GraphSet
from graphmem.store.setstore import GraphSetError, content_sha256, file_sha256
from tests.one_line_errors import error_line, run_script

ROOT = Path(__file__).resolve().parents[1]


def _edit(directory, change, restamp=False):
    """Apply ``change(manifest)``; with ``restamp``, also rewrite its checksum as a writer would."""
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    if restamp:
        manifest["content_sha256"] = content_sha256(manifest)
    path.write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")


def _set_text(m):
    m["questions"][3]["text"] = m["questions"][3]["text"][:-1] + "X"


def _set_evidence(m):
    m["questions"][0]["evidence"] = list(m["questions"][1]["evidence"])


@pytest.mark.parametrize("change", [_set_text, _set_evidence], ids=["question_text", "evidence"])
def test_an_edited_manifest_is_refused_by_its_own_checksum(set_copy, change):
    GraphSet.load(set_copy)
    _edit(set_copy, change)
    with pytest.raises(GraphSetError, match=r"manifest.json: content differs from its checksum"):
        GraphSet.load(set_copy)


def _reorder(m):
    m["questions"][0], m["questions"][1] = m["questions"][1], m["questions"][0]


def _move_graph(m):
    other = next(q["graph"] for q in m["questions"] if q["graph"] != m["questions"][0]["graph"])
    m["questions"][0]["graph"] = other


@pytest.mark.parametrize("change", [_reorder, _move_graph], ids=["reordered", "moved_to_another_graph"])
def test_query_rows_are_bound_to_their_questions_even_under_a_restamped_manifest(set_copy, change):
    _edit(set_copy, change, restamp=True)
    with pytest.raises(
        GraphSetError, match=r"queries.safetensors: its rows belong to other questions or another order"
    ):
        GraphSet.load(set_copy)


def test_graphs_as_a_list_is_one_error_naming_the_field(set_copy):
    _edit(set_copy, lambda m: m.update(graphs=list(m["graphs"].values())), restamp=True)
    with pytest.raises(GraphSetError, match=r"manifest.json: field 'graphs' must be a JSON object, got list"):
        GraphSet.load(set_copy)


def test_a_duplicate_question_id_is_refused_at_load(set_copy):
    _edit(set_copy, lambda m: m["questions"][1].update(qid=m["questions"][0]["qid"]), restamp=True)
    with pytest.raises(GraphSetError, match=r"question id 'conv-26#0' occurs more than once"):
        GraphSet.load(set_copy)


def test_all_zero_query_rows_are_refused(set_copy):
    manifest = json.loads((set_copy / "manifest.json").read_text())
    queries = set_copy / manifest["queries"]
    emb = load_file(str(queries))["query_embeddings"]
    emb[7] = 0.0
    from safetensors import safe_open

    with safe_open(str(queries), framework="pt") as f:
        meta = f.metadata()
    save_file({"query_embeddings": emb}, str(queries), metadata=meta)
    _edit(
        set_copy,
        lambda m: m["files"][m["queries"]].update(sha256=file_sha256(queries), bytes=queries.stat().st_size),
        restamp=True,
    )
    with pytest.raises(GraphSetError, match=r"1 query embedding rows are all zero .*first row 7"):
        GraphSet.load(set_copy)


def test_a_set_of_the_previous_format_is_refused_with_a_rebuild_hint(set_copy):
    _edit(set_copy, lambda m: m.update(manifest_version=2))
    with pytest.raises(GraphSetError, match=r"manifest_version 2 is not 3 \(the set predates the current format"):
        GraphSet.load(set_copy)


def test_a_manifest_that_is_not_json_is_one_line_naming_the_file(set_copy, tmp_path):
    (set_copy / "manifest.json").write_text("not json at all")
    proc = run_script(
        "evaluate.py", f"graphset={set_copy}", "policies=[dense_topk]", f"out_dir={tmp_path / 'o'}", tmp_path=tmp_path
    )
    assert f"{set_copy / 'manifest.json'}: not valid JSON" in error_line(proc)


def _build_args(tmp_path):
    return [
        "data=locomo",
        "data.limit=2",
        "graph.encoder=hashing",
        f"graph.cache_dir={tmp_path / 'cache'}",
        f"graphset_dir={tmp_path / 'sets'}",
        f"out_dir={tmp_path / 'run'}",
        "progress=false",
    ]


def test_an_unknown_plot_graph_is_refused_before_the_set_is_committed(tmp_path):
    proc = run_script("build_graph.py", *_build_args(tmp_path), "plot_graph=nope", tmp_path=tmp_path)
    assert "plot_graph='nope' is not a graph of this set" in error_line(proc)
    assert not list((tmp_path / "sets").rglob("manifest.json")) and not list((tmp_path / "sets").rglob("gen-*"))


DATA, GRAPH = DataConfig(name="locomo", limit=2), GraphConfig(encoder="hashing")


def test_a_reused_set_drops_orphan_generations(tmp_path):
    graph = GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "cache"))
    out = tmp_path / "set"
    reuse_or_build(DATA, graph, out, progress=False)
    (live,) = [p.name for p in out.glob("gen-*")]
    shutil.copytree(out / live, out / "gen-20000101T000000-0badc0de")  # what a killed build leaves behind
    _, status = reuse_or_build(DATA, graph, out, progress=False)
    assert status == "reused" and [p.name for p in out.glob("gen-*")] == [live]


def test_a_full_disk_during_a_rebuild_is_one_line_and_keeps_the_previous_set(tmp_path, monkeypatch):
    graph = GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "cache"))
    out = tmp_path / "set"
    before, _ = reuse_or_build(DATA, graph, out, progress=False)
    manifest = (out / "manifest.json").read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(graphmem.store.setformat, "save_graph", full_disk)
    with pytest.raises(GraphSetError) as err:
        reuse_or_build(DATA, graph, out, progress=False, force=True)
    message = str(err.value)
    assert "\n" not in message and "no space left on device" in message and "the previous set is intact" in message
    assert ".safetensors" in message.split(":")[0]
    assert (out / "manifest.json").read_bytes() == manifest and len(list(out.glob("gen-*"))) == 1
    assert torch.equal(GraphSet.load(out).query_embeddings, before.query_embeddings)
