"""The embedding cache is keyed by the model's identity and checked by content: a damaged shard is never used."""

import logging

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.index.embed import HashingEncoder, encoder_fingerprint
from graphmem.store.encoder_cache import CachedEncoder

TEXTS = [f"memory {i} about topic {i % 7} and place {i % 5}" for i in range(200)]


def _flip_signs(shard, share=0.05):
    """Flip the sign of ``share`` of the stored values, keeping the file a valid shard with its old header."""
    data = load_file(str(shard))
    with safe_open(str(shard), framework="pt") as f:
        meta = f.metadata()
    emb = data["embeddings"].clone()
    flat = emb.view(-1)
    idx = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(0))[: int(share * flat.numel())]
    flat[idx] = -flat[idx]
    save_file({"digests": data["digests"], "embeddings": emb}, str(shard), metadata=meta)


def test_a_damaged_shard_is_dropped_with_a_warning_and_recomputed(tmp_path, caplog):
    encoder = HashingEncoder(64)
    truth = encoder.encode(TEXTS)
    first = CachedEncoder(encoder, tmp_path)
    first.encode(TEXTS)
    (shard,) = first.dir.glob("shard-*.safetensors")
    _flip_signs(shard)
    again = CachedEncoder(HashingEncoder(64), tmp_path)
    with caplog.at_level(logging.WARNING, logger="graphmem.store.encoder_cache"):
        rows = again.encode(TEXTS)
    assert torch.equal(rows, truth) and again.misses == len(TEXTS) and again.dropped == 1
    assert "differ from their checksum (damaged)" in caplog.text
    third = CachedEncoder(HashingEncoder(64), tmp_path)  # the recomputed rows are a sound shard again
    assert torch.equal(third.encode(TEXTS), truth) and third.hits == len(TEXTS) and third.dropped == 0


class _Renamed:
    """Another model presenting the same name and width as the hashing encoder (no fingerprint of its own)."""

    def __init__(self, flip: bool):
        self.inner, self.name, self.dim, self.flip = HashingEncoder(64), "hashing-bow-64", 64, flip

    def encode(self, texts):
        rows = self.inner.encode(texts)
        return torch.roll(rows, 1, dims=1) if self.flip else rows


def test_the_model_identity_is_in_the_key(tmp_path):
    assert encoder_fingerprint(_Renamed(False)) != encoder_fingerprint(_Renamed(True))  # probe embeddings differ
    a, b = CachedEncoder(_Renamed(False), tmp_path), CachedEncoder(_Renamed(True), tmp_path)
    assert a.dir != b.dir
    a.encode(TEXTS)
    rows = b.encode(TEXTS)
    assert b.hits == 0 and torch.equal(rows, _Renamed(True).encode(TEXTS))


def test_a_shard_of_another_model_copied_in_is_not_used(tmp_path, caplog):
    a, b = CachedEncoder(_Renamed(False), tmp_path), CachedEncoder(_Renamed(True), tmp_path)
    a.encode(TEXTS)
    (shard,) = a.dir.glob("shard-*.safetensors")
    b.dir.mkdir(parents=True)
    (b.dir / shard.name).write_bytes(shard.read_bytes())
    with caplog.at_level(logging.WARNING, logger="graphmem.store.encoder_cache"):
        rows = b.encode(TEXTS)
    assert b.hits == 0 and "written for another model" in caplog.text
    assert torch.equal(rows, _Renamed(True).encode(TEXTS))


def test_a_build_on_a_damaged_cache_gives_the_same_set(tmp_path):
    data = DataConfig(name="locomo", limit=1)
    graph = GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "cache"))
    clean = build_graphset(data, graph, progress=False)
    for shard in (tmp_path / "cache").rglob("shard-*.safetensors"):
        _flip_signs(shard)
    again = build_graphset(data, graph, progress=False)
    assert torch.equal(again.query_embeddings, clean.query_embeddings)
    assert all(torch.equal(again.graphs[n].embeddings, g.embeddings) for n, g in clean.graphs.items())
    assert clean.provenance["encoder_fingerprint"] == encoder_fingerprint(HashingEncoder(384))
