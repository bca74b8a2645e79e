"""Checkpoints carry a SHA-256 over their tensors (graphmem.store.checkpoint): a damaged file is refused in one line."""

import re
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from graphmem.policies.gnn import GNNPolicy, load_reader
from graphmem.policies.router import RouterPolicy
from graphmem.store.checkpoint import FORMAT, CheckpointError, load_checkpoint, save_checkpoint, state_digest
from models.gnn_reader import GNNReader
from rl.gnn.train import save_checkpoint as save_reader
from tests.one_line_errors import error_line, run_script
from tests.test_walk_trainer import config, trainer


def tensor_entries(path: Path) -> list[tuple[str, int, int]]:
    """``(name, offset of its first byte, size)`` of every non-empty tensor storage in a ``torch.save`` zip."""
    raw = path.read_bytes()
    entries = []
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if re.search(r"/data/\d+$", info.filename) and info.file_size:
                name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
                entries.append((info.filename, info.header_offset + 30 + name_len + extra_len, info.file_size))
    return entries


def flip_byte(path: Path, offset: int) -> Path:
    """``path`` with the byte at ``offset`` inverted in place (the zip stays readable: torch checks no CRC)."""
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path


def damaged_copy(src: Path, dst: Path, entry: int = -1) -> Path:
    """A copy of ``src`` with one byte flipped in the middle of its ``entry``-th tensor storage."""
    _, offset, size = tensor_entries(src)[entry]
    return flip_byte(Path(shutil.copy(src, dst)), offset + size // 2)


def refusal(load, path: Path) -> str:
    """The one-line :class:`CheckpointError` ``load(path)`` raises, naming ``path``."""
    with pytest.raises(CheckpointError) as err:
        load(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def router_best(tmp_path_factory) -> Path:
    """The ``best.pt`` a tiny walk-trainer run writes."""
    folder = tmp_path_factory.mktemp("router")
    trainer(config(run={"device": "cpu", "checkpoint_dir": str(folder)})).learn()
    return folder / "best.pt"


@pytest.fixture
def gnn_checkpoint(tmp_path) -> Path:
    return save_reader(GNNReader(input_dim=8, hidden_dim=8), tmp_path / "reader.pt", run_id="r1")


def test_the_digest_reads_dtype_shape_and_bytes_not_layout_or_key_order():
    t = torch.arange(6, dtype=torch.float32).view(2, 3)
    assert state_digest({"a": t.T, "b": [1, "x"]}) == state_digest({"b": [1, "x"], "a": t.T.contiguous()})
    assert state_digest({"a": torch.zeros(4, dtype=torch.int32)}) != state_digest({"a": torch.zeros(4)})
    assert state_digest({"a": t}) != state_digest({"a": t.view(3, 2)})
    assert state_digest({"a": t, "epoch": 1}) != state_digest({"a": t, "epoch": 2})


def test_every_tensor_storage_of_a_router_checkpoint_is_covered(router_best, tmp_path):
    assert RouterPolicy(checkpoint=router_best, device="cpu").scorer is not None  # the intact file loads
    entries = tensor_entries(router_best)
    assert len(entries) > 10  # the scorer, the optimizer state, the RNG states
    for i, (name, offset, size) in enumerate(entries):
        bad = flip_byte(Path(shutil.copy(router_best, tmp_path / f"flip{i}.pt")), offset + size // 2)
        assert "differ from their checksum" in refusal(lambda p: load_checkpoint(p, "walk"), bad), name


def test_a_router_policy_refuses_a_flipped_byte(router_best, tmp_path):
    bad = damaged_copy(router_best, tmp_path / "best.pt")
    assert "differ from their checksum" in refusal(lambda p: RouterPolicy(checkpoint=p, device="cpu"), bad)


def test_resuming_from_a_damaged_last_pt_is_refused(router_best, tmp_path):
    damaged_copy(router_best.with_name("last.pt"), tmp_path / "last.pt")
    resumed = trainer(config(run={"device": "cpu", "checkpoint_dir": str(tmp_path), "resume": True}))
    assert "differ from their checksum" in refusal(lambda p: resumed.learn(), tmp_path / "last.pt")


def test_a_gnn_checkpoint_with_a_flipped_byte_is_refused(gnn_checkpoint, tmp_path):
    assert load_reader(gnn_checkpoint)[0].config.input_dim == 8 and GNNPolicy(checkpoint=gnn_checkpoint).reader
    bad = damaged_copy(gnn_checkpoint, tmp_path / "bad.pt")
    for load in (lambda p: GNNPolicy(checkpoint=p), load_reader):
        assert "differ from their checksum" in refusal(load, bad)


def test_truncated_foreign_older_and_edited_checkpoints_are_refused(gnn_checkpoint, tmp_path):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(gnn_checkpoint.read_bytes()[:-200])
    assert "refused to load" in refusal(lambda p: load_checkpoint(p, "gnn"), cut)
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    assert "refused to load" in refusal(lambda p: load_checkpoint(p, "gnn"), text)
    assert "not the 'walk' checkpoint" in refusal(lambda p: RouterPolicy(checkpoint=p, device="cpu"), gnn_checkpoint)
    state = torch.load(gnn_checkpoint, weights_only=True)
    older = tmp_path / "older.pt"
    torch.save({**state, "format": "graphmem-router-checkpoint-v1"}, older)
    assert "before checkpoints carried a checksum" in refusal(lambda p: load_checkpoint(p, "gnn"), older)
    torch.save({k: v for k, v in state.items() if k != "sha256"}, older)
    assert "records no checksum" in refusal(lambda p: load_checkpoint(p, "gnn"), older)
    torch.save(GNNReader(input_dim=8).checkpoint(), older)  # a reader file of before the format tag
    assert f"not a {FORMAT} file" in refusal(load_reader, older)
    edited = tmp_path / "edited.pt"
    torch.save({**state, "run_id": "r2"}, edited)
    assert "differ from their checksum" in refusal(lambda p: load_checkpoint(p, "gnn"), edited)


def test_the_saver_keeps_its_own_keys(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(tmp_path / "x.pt", "walk", {"kind": "gnn"})
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("policy", ["router", "gnn"])
def test_evaluate_refuses_a_damaged_checkpoint_in_one_line(router_best, gnn_checkpoint, tmp_path, policy):
    bad = damaged_copy(router_best if policy == "router" else gnn_checkpoint, tmp_path / "damaged.pt")
    proc = run_script(
        "evaluate.py", f"policy={policy}", f"policy.checkpoint={bad}", f"out_dir={tmp_path / 'o'}", tmp_path=tmp_path
    )
    line = error_line(proc)
    assert str(bad) in line and "differ from their checksum" in line, line
