"""A saved graph set is one unit: damaged, swapped or inconsistent files are refused, naming the file.

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
from tests.small_sets import saved_locomo_set


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return saved_locomo_set(tmp_path_factory.mktemp("integrity"), limit=2)


@pytest.fixture
def saved(built, tmp_path):
    return shutil.copytree(built, tmp_path / "set")


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


def test_flipped_bytes_in_query_embeddings_are_refused(saved):
    queries = _file(saved, "queries.safetensors")
    raw = bytearray(queries.read_bytes())
    raw[-64:] = b"\xff" * 64  # the last row's tail: NaN floats, the file still parses
    queries.write_bytes(bytes(raw))
    with pytest.raises(GraphSetError, match="queries.safetensors: checksum differs"):
        GraphSet.load(saved)


def test_non_finite_query_rows_are_refused_even_with_matching_checksums(saved):
    queries = _file(saved, "queries.safetensors")
    emb = load_file(str(queries))["query_embeddings"]
    emb[5:25] = float("nan")
    emb[30, 0] = float("inf")
    save_file({"query_embeddings": emb}, str(queries))
    _restamp(saved, queries)
    with pytest.raises(
        GraphSetError, match=r"21 query embedding rows hold inf or NaN, first row 5 \(question 'conv-26#5'\)"
    ):
        GraphSet.load(saved)


def test_query_embeddings_of_another_dimension_are_refused(saved):
    queries = _file(saved, "queries.safetensors")
    emb = load_file(str(queries))["query_embeddings"]
    save_file({"query_embeddings": torch.nn.functional.normalize(emb[:, :16].contiguous(), dim=1)}, str(queries))
    _restamp(saved, queries)
    with pytest.raises(GraphSetError, match=r"shape \(\d+, 16\).*embedding size \[\d+\]"):
        GraphSet.load(saved)


def test_graph_file_copied_over_another_graphs_file_is_refused(saved):
    shutil.copyfile(_file(saved, "conv-26.safetensors"), _file(saved, "conv-30.safetensors"))
    with pytest.raises(GraphSetError, match="conv-30.safetensors: .*(checksum differs|manifest.json lists)"):
        GraphSet.load(saved)
    _restamp(saved, _file(saved, "conv-30.safetensors"))  # even a manifest that agrees with the bytes
    with pytest.raises(GraphSetError, match="conv-30.safetensors: holds graph 'conv-26', expected 'conv-30'"):
        GraphSet.load(saved)


def test_truncated_and_missing_files_name_the_file(saved, built):
    manifest = saved / "manifest.json"
    manifest.write_text(manifest.read_text()[:2000])
    with pytest.raises(GraphSetError, match=r"manifest.json: not valid JSON, truncated or corrupted\?"):
        GraphSet.load(saved)
    GraphSet.load(built).save(saved)  # a damaged set can be replaced by a new commit
    assert GraphSet.load(saved).config_hash == GraphSet.load(built).config_hash
    graph = _file(saved, "conv-26.safetensors")
    graph.unlink()
    with pytest.raises(GraphSetError, match="conv-26.safetensors: listed in manifest.json but missing"):
        GraphSet.load(saved)


def test_a_set_without_checksums_is_refused_with_a_rebuild_hint(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["manifest_version"] = 1
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GraphSetError, match=r"predates the current format.*\); rebuild it"):
        GraphSet.load(saved)


def test_extra_files_are_committed_and_verified_with_the_set(saved):
    before = GraphSet.load(saved)
    stored = add_files(saved, {"index/conv-26.bin": lambda p: p.write_bytes(b"index bytes")}, index_kind="toy")
    after = GraphSet.load(saved)
    assert set(after.files) == {"index/conv-26.bin"} and after.files["index/conv-26.bin"].read_bytes() == b"index bytes"
    assert json.loads((saved / "manifest.json").read_text())["index_kind"] == "toy"
    assert list(after.graphs) == list(before.graphs) and torch.equal(after.query_embeddings, before.query_embeddings)
    assert len([p for p in saved.iterdir() if p.name.startswith("gen-")]) == 1  # the old generation is gone
    (saved / stored["index/conv-26.bin"]).write_bytes(b"other bytes")
    with pytest.raises(GraphSetError, match="conv-26.bin: .*(checksum differs|bytes)"):
        GraphSet.load(saved)


def test_files_the_manifest_does_not_list_are_left_alone(saved, tmp_path):
    (saved / "neighbourhood.png").write_bytes(b"png")
    (saved / "cache").mkdir()
    gs = GraphSet.load(saved)
    gs.save(saved)  # a commit over the set keeps what it does not own
    assert (saved / "neighbourhood.png").read_bytes() == b"png" and (saved / "cache").is_dir()
    assert GraphSet.load(saved).config_hash == gs.config_hash
