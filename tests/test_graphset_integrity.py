"""A set_copy graph set is one unit: damaged, swapped or inconsistent files are refused, naming the file.

Flipped bytes in the query embeddings, NaN query rows and a graph file copied over another's
must each be refused before anything is scored.
"""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from graphmem.store.graphset import GraphSet, file_sha256
from graphmem.store.setstore import GraphSetError, add_files, content_sha256


def _file(directory, suffix):
    (path,) = [p for p in directory.rglob("*.safetensors") if str(p).endswith(suffix)]
    return path


def _restamp(directory, path):
    """Rewrite the manifest's checksum of ``path`` as a writer would have (no-op for sets without checksums)."""
    manifest_path = directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    rel = str(path.relative_to(directory))
    if rel in manifest.get("files", {}):
        manifest["files"][rel] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
        manifest["content_sha256"] = content_sha256(manifest)
        manifest_path.write_text(json.dumps(manifest))


def test_flipped_bytes_in_query_embeddings_are_refused(set_copy):
    queries = _file(set_copy, "queries.safetensors")
    raw = bytearray(queries.read_bytes())
    raw[-64:] = b"\xff" * 64  # the last row's tail: NaN floats, the file still parses
    queries.write_bytes(bytes(raw))
    with pytest.raises(GraphSetError, match="queries.safetensors: checksum differs"):
        GraphSet.load(set_copy)


def test_non_finite_query_rows_are_refused_even_with_matching_checksums(set_copy):
    queries = _file(set_copy, "queries.safetensors")
    emb = load_file(str(queries))["query_embeddings"]
    emb[5:25] = float("nan")
    emb[30, 0] = float("inf")
    save_file({"query_embeddings": emb}, str(queries))
    _restamp(set_copy, queries)
    with pytest.raises(
        GraphSetError, match=r"21 query embedding rows hold inf or NaN, first row 5 \(question 'conv-26#5'\)"
    ):
        GraphSet.load(set_copy)


def test_query_embeddings_of_another_dimension_are_refused(set_copy):
    queries = _file(set_copy, "queries.safetensors")
    emb = load_file(str(queries))["query_embeddings"]
    save_file({"query_embeddings": torch.nn.functional.normalize(emb[:, :16].contiguous(), dim=1)}, str(queries))
    _restamp(set_copy, queries)
    with pytest.raises(GraphSetError, match=r"shape \(\d+, 16\).*embedding size \[\d+\]"):
        GraphSet.load(set_copy)


def test_graph_file_copied_over_another_graphs_file_is_refused(set_copy):
    shutil.copyfile(_file(set_copy, "conv-26.safetensors"), _file(set_copy, "conv-30.safetensors"))
    with pytest.raises(GraphSetError, match="conv-30.safetensors: .*(checksum differs|manifest.json lists)"):
        GraphSet.load(set_copy)
    _restamp(set_copy, _file(set_copy, "conv-30.safetensors"))  # even a manifest that agrees with the bytes
    with pytest.raises(GraphSetError, match="conv-30.safetensors: holds graph 'conv-26', expected 'conv-30'"):
        GraphSet.load(set_copy)


def test_truncated_and_missing_files_name_the_file(set_copy, locomo2_set):
    manifest = set_copy / "manifest.json"
    manifest.write_text(manifest.read_text()[:2000])
    with pytest.raises(GraphSetError, match=r"manifest.json: not valid JSON, truncated or corrupted\?"):
        GraphSet.load(set_copy)
    GraphSet.load(locomo2_set).save(set_copy)  # a damaged set can be replaced by a new commit
    assert GraphSet.load(set_copy).config_hash == GraphSet.load(locomo2_set).config_hash
    graph = _file(set_copy, "conv-26.safetensors")
    graph.unlink()
    with pytest.raises(GraphSetError, match="conv-26.safetensors: listed in manifest.json but missing"):
        GraphSet.load(set_copy)


def test_a_set_without_checksums_is_refused_with_a_rebuild_hint(set_copy):
    manifest = json.loads((set_copy / "manifest.json").read_text())
    manifest["manifest_version"] = 1
    (set_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GraphSetError, match=r"predates the current format.*\); rebuild it"):
        GraphSet.load(set_copy)


def test_extra_files_are_committed_and_verified_with_the_set(set_copy):
    before = GraphSet.load(set_copy)
    stored = add_files(set_copy, {"index/conv-26.bin": lambda p: p.write_bytes(b"index bytes")}, index_kind="toy")
    after = GraphSet.load(set_copy)
    assert set(after.files) == {"index/conv-26.bin"} and after.files["index/conv-26.bin"].read_bytes() == b"index bytes"
    assert json.loads((set_copy / "manifest.json").read_text())["index_kind"] == "toy"
    assert list(after.graphs) == list(before.graphs) and torch.equal(after.query_embeddings, before.query_embeddings)
    assert len([p for p in set_copy.iterdir() if p.name.startswith("gen-")]) == 1  # the old generation is gone
    (set_copy / stored["index/conv-26.bin"]).write_bytes(b"other bytes")
    with pytest.raises(GraphSetError, match="conv-26.bin: .*(checksum differs|bytes)"):
        GraphSet.load(set_copy)


def test_files_the_manifest_does_not_list_are_left_alone(set_copy, tmp_path):
    (set_copy / "neighbourhood.png").write_bytes(b"png")
    (set_copy / "cache").mkdir()
    gs = GraphSet.load(set_copy)
    gs.save(set_copy)  # a commit over the set keeps what it does not own
    assert (set_copy / "neighbourhood.png").read_bytes() == b"png" and (set_copy / "cache").is_dir()
    assert GraphSet.load(set_copy).config_hash == gs.config_hash
