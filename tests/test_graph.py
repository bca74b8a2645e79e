"""MemoryGraph: mutations, validation, CSR access, PyG conversion and safetensors round trips."""

import json
import struct

import pytest
import torch

from graphmem.core.graph import GraphError, MemoryGraph, out_csr
from graphmem.core.pyg import from_pyg, to_pyg
from graphmem.store.io import SCHEMA_VERSION, load_graph, save_graph


def toy_graph() -> MemoryGraph:
    g = MemoryGraph.empty(dim=3, info={"name": "toy"})
    g.add_nodes(
        ["a", "b", "c", "d"],
        ["alpha text", "bravo text here", "charlie", "delta"],
        torch.eye(4, 3),
        timestamps=[1.0, 2.0, float("nan"), 4.0],
        metadata=[{"speaker": "x"}, {"speaker": "y"}, {}, {"session": 2}],
    )
    g.add_edges([0, 1, 0, 2], [1, 0, 2, 3], [0, 1, 3, 2])
    return g


def test_posterior_mean_starts_neutral_and_follows_eq19():
    g = toy_graph()
    assert torch.equal(g.posterior_mean, torch.full((4,), 0.5))
    assert g.observe("a", "b", "helpful", 0.75) == 1
    assert g.observe("a", "b", "harmful", 0.25) == 1
    e = int(g.edges_between(0, 1)[0])
    assert g.S[e].item() == 0.75 and g.F[e].item() == 0.25
    assert g.posterior_mean[e].item() == pytest.approx((0.75 + 1) / (0.75 + 0.25 + 2))
    # directed: the reverse edge keeps its own counters
    assert g.posterior_mean[int(g.edges_between(1, 0)[0])].item() == 0.5


def test_observe_never_creates_edges_and_ignores_neutral():
    g = toy_graph()
    assert g.observe("b", "d", "helpful", 1.0) == 0
    assert g.num_edges == 4
    assert g.observe("a", "b", "neutral", 1.0) == 0 and g.observe("a", "b", "helpful", 0.0) == 0
    assert float(g.S.sum()) == 0 and float(g.F.sum()) == 0
    with pytest.raises(GraphError, match="confidence"):
        g.observe("a", "b", "helpful", 1.5)
    with pytest.raises(GraphError, match="label"):
        g.observe("a", "b", "great", 0.5)


def test_csr_lists_out_edges_by_target():
    g = toy_graph()
    g.add_edges([0], [3], "semantic")
    rowptr, perm = out_csr(g)
    assert rowptr.tolist() == [0, 3, 4, 5, 5]
    assert g.edge_index[1, g.out_edges(0)].tolist() == [1, 2, 3]
    assert g.edge_index[1, g.out_edges(3)].tolist() == []


def test_default_features_are_one_hot_and_init_is_kept():
    g = toy_graph()
    assert torch.equal(g.edge_attr, torch.nn.functional.one_hot(g.edge_type, 4).float())
    e = g.add_edge("d", "a", "semantic", [0.1, 0.9, 0.0, 0.2])
    assert torch.allclose(g.edge_attr[e], torch.tensor([0.1, 0.9, 0.0, 0.2]))
    assert torch.equal(g.edge_attr_init[e], g.edge_attr[e])


def test_mutations_are_validated_with_named_culprits():
    g = toy_graph()
    with pytest.raises(GraphError, match="'zz' does not exist"):
        g.add_edge("a", "zz", "temporal")
    with pytest.raises(GraphError, match="unknown relation"):
        g.add_edge("a", "b", "friendship")
    with pytest.raises(GraphError, match="'a' already exists"):
        g.add_nodes(["a"], ["dup"], torch.zeros(1, 3))
    with pytest.raises(GraphError, match="'e'.*NaN"):
        g.add_nodes(["e"], ["x"], torch.tensor([[float("nan"), 0, 0]]))
    with pytest.raises(GraphError, match="embeddings"):
        g.add_nodes(["e"], ["x"], torch.zeros(1, 5))
    with pytest.raises(GraphError, match="edge_attr"):
        g.add_edges([0], [1], "temporal", features=torch.zeros(1, 3))
    assert g.num_nodes == 4 and g.num_edges == 4


def test_remove_and_revise_nodes():
    g = toy_graph()
    g.observe("c", "d", "helpful", 1.0)
    g.remove_nodes(["a"])
    assert g.node_ids == ["b", "c", "d"]
    assert g.edge_index.tolist() == [[1], [2]]  # only c -> d survives
    assert g.S.tolist() == [1.0]
    g.revise_node("c", text="charlie revised", key="charlie")
    assert g.texts[1] == "charlie revised" and g.keys[1] == "charlie"
    g.validate()


def test_validate_names_edge_and_field():
    g = toy_graph()
    g.S[2] = -1.0
    with pytest.raises(GraphError, match=r"edge 2 \('a' -> 'c', entity\): field 'S'"):
        g.validate()
    g = toy_graph()
    g.edge_index[1, 0] = 9
    with pytest.raises(GraphError, match="missing node"):
        g.validate()
    g = toy_graph()
    g.F = g.F[:2]
    with pytest.raises(GraphError, match="field 'F'"):
        g.validate()


def test_pyg_round_trip():
    g = toy_graph()
    g.observe("a", "c", "harmful", 0.5)
    h = from_pyg(to_pyg(g))
    for name in ("embeddings", "edge_index", "edge_type", "S", "F", "edge_attr", "edge_attr_init"):
        assert torch.equal(getattr(h, name), getattr(g, name)), name
    assert h.node_ids == g.node_ids and h.metadata == g.metadata and h.info == g.info


def test_save_load_round_trip_is_identical(tmp_path):
    g = toy_graph()
    g.observe("a", "b", "helpful", 0.3)
    g.edge_attr[0] += 0.25
    path = save_graph(g, tmp_path / "g.safetensors")
    h = load_graph(path)
    for name in ("embeddings", "timestamps", "edge_index", "edge_type", "S", "F", "edge_attr", "edge_attr_init"):
        assert torch.equal(getattr(h, name), getattr(g, name)) or (
            name == "timestamps" and torch.equal(h.timestamps.isnan(), g.timestamps.isnan())
        ), name
    assert (h.node_ids, h.texts, h.keys, h.metadata, h.relations, h.info) == (
        g.node_ids,
        g.texts,
        g.keys,
        g.metadata,
        g.relations,
        g.info,
    )
    assert list(tmp_path.iterdir()) == [path]  # no temp files left behind


def test_truncated_file_is_refused(tmp_path):
    path = save_graph(toy_graph(), tmp_path / "g.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(GraphError, match="truncated or corrupted"):
        load_graph(path)


def _rewrite_header(path, edit):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    edit(header)
    new = json.dumps(header).encode()
    new += b" " * ((8 - len(new) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n :])


def test_hand_edited_file_is_refused(tmp_path):
    path = save_graph(toy_graph(), tmp_path / "g.safetensors")

    def edit_text(header):
        meta = json.loads(header["__metadata__"]["graphmem"])
        meta["texts"][0] = "tampered"
        header["__metadata__"]["graphmem"] = json.dumps(meta)

    _rewrite_header(path, edit_text)
    with pytest.raises(GraphError, match="checksum mismatch"):
        load_graph(path)


def test_wrong_schema_version_is_refused(tmp_path):
    path = save_graph(toy_graph(), tmp_path / "g.safetensors")
    _rewrite_header(path, lambda h: h["__metadata__"].update(schema_version=str(SCHEMA_VERSION + 1)))
    with pytest.raises(GraphError, match="schema_version"):
        load_graph(path)


def test_failed_save_keeps_previous_file(tmp_path):
    path = save_graph(toy_graph(), tmp_path / "g.safetensors")
    before = path.read_bytes()
    bad = toy_graph()
    bad.embeddings[0, 0] = float("nan")
    with pytest.raises(GraphError):
        save_graph(bad, path)
    assert path.read_bytes() == before
