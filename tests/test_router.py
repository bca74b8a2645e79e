"""Relation intent, per-segment top-k and the router policy's refusal of checkpoints that are not its own."""

import os
import pickle

import pytest
import torch

from graphmem.policies.batched import segment_topk
from graphmem.policies.router import RouterPolicy
from models.intent import RelationIntent
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.common.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def test_intent_kinds():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    protos = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    pi = RelationIntent(2, "prototype", prototypes=protos)(q)
    assert pi.argmax(1).tolist() == [0, 1] and torch.allclose(pi.sum(1), torch.ones(2))
    assert torch.allclose(RelationIntent(2, "head")(q), torch.full((2, 4), 0.25))
    assert torch.allclose(RelationIntent(2, "uniform")(q), torch.full((2, 4), 0.25))
    ext = RelationIntent(2, "external")
    assert torch.allclose(
        ext(q, torch.tensor([[2.0, 0, 0, 2], [0, 1, 0, 0]])), torch.tensor([[0.5, 0, 0, 0.5], [0, 1, 0, 0]])
    )
    with pytest.raises(ValueError):
        ext(q)
    with pytest.raises(ValueError):
        RelationIntent(2, "uniform")(q, torch.ones(2, 4))


def test_segment_topk_per_segment():
    s = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.2])
    seg = torch.tensor([0, 0, 0, 1, 1])
    assert sorted(segment_topk(s, seg, 2).tolist()) == [1, 2, 3, 4]
    assert sorted(segment_topk(s, seg, 1).tolist()) == [1, 3]


@pytest.mark.parametrize("layout", ["sorted", "unsorted", "one-hub", "int-ties"])
def test_segment_topk_matches_python_reference(layout):
    gen = torch.Generator().manual_seed(4)
    deg = torch.randint(0, 6, (50,), generator=gen)
    if layout == "one-hub":
        deg[7] = 2000  # runs of very different length: the flat two-sort path
    seg = torch.repeat_interleave(torch.arange(50), deg)
    score = torch.randint(0, 4, (seg.numel(),), generator=gen)  # many ties
    if layout != "int-ties":
        score = score.float()
    if layout == "unsorted":
        seg = seg[torch.randperm(seg.numel(), generator=gen)]
    got = segment_topk(score, seg, 2).tolist()
    want = []
    for j in sorted(set(seg.tolist())):
        members = [i for i in range(seg.numel()) if seg[i] == j]
        want += sorted(members, key=lambda i: (-score[i].item(), i))[:2]
    assert got == want


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned_marker",))


def test_crafted_pickle_checkpoint_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.pt"
    with open(bad, "wb") as f:
        pickle.dump({"kind": "walk", "scorer": _Exploit()}, f)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(bad, "walk")
    with pytest.raises(CheckpointError, match="refused"):
        RouterPolicy(checkpoint=bad, device="cpu")
    torch.save({"kind": "walk", "scorer": _Exploit()}, tmp_path / "bad2.pt")
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(tmp_path / "bad2.pt", "walk")
    assert not (tmp_path / "pwned_marker").exists()


def test_a_checkpoint_without_a_walk_scorer_is_refused(tmp_path):
    other = save_checkpoint(tmp_path / "other.pt", "gnn", {"weights": {"w": torch.zeros(2)}})
    with pytest.raises(CheckpointError, match="a 'gnn' checkpoint, not the 'walk' checkpoint"):
        RouterPolicy(checkpoint=other, device="cpu")
    no_scorer = save_checkpoint(tmp_path / "no_scorer.pt", "walk", {"weights": {"w": torch.zeros(2)}})
    with pytest.raises(CheckpointError, match="not a router checkpoint"):
        RouterPolicy(checkpoint=no_scorer, device="cpu")
    scorer = WalkScorer(ScorerConfig(dim=4)).checkpoint()
    good = save_checkpoint(tmp_path / "walk.pt", "walk", {"scorer": scorer, "finished": True})
    assert RouterPolicy(checkpoint=good, device="cpu").scorer.config.dim == 4
