"""A run owns its folder: one live run at a time, resume only with the same config, one run id."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from graphmem.store.lockfile import FileLock
from graphmem.store.run_folder import RunFolderError, differing_keys, open_run_folder
from tests import script_runner
from tests.small_sets import saved_locomo_set

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"trainer": {"seed": 0, "lr_router": 0.003, "epochs": 2, "resume": False}, "cv": {"k": 5}, "out_dir": "a"}

HOLDER = textwrap.dedent("""
    import sys, time
    from graphmem.store.run_folder import open_run_folder
    folder = open_run_folder(sys.argv[1], {"trainer": {"seed": 0}}, resume=False)
    print(folder.run_id, flush=True)
    time.sleep(600)
""")


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_a_live_run_holds_its_folder_and_a_dead_ones_lock_is_stale(tmp_path, caplog):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    run_id = holder.stdout.readline().strip()
    try:
        with pytest.raises(RunFolderError, match=rf"is in use by run {run_id} \(pid {holder.pid} on "):
            open_run_folder(tmp_path, CONFIG, resume=False)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with open_run_folder(tmp_path, CONFIG, resume=False) as folder:  # the kernel dropped the dead run's lock
        assert folder.run_id != run_id and not folder.resumed
        probe = f"from graphmem.store.lockfile import FileLock; FileLock({str(tmp_path / '.run.lock')!r}).acquire()"
        proc = script_runner.run([sys.executable, "-c", probe], env=_env(), timeout=120)
        assert proc.returncode != 0 and "LockBusyError" in proc.stderr  # a raw second lock is refused too
    assert f"took over the stale lock of run {run_id}" in caplog.text
    assert not (tmp_path / ".run.lock").exists()  # a clean release removes the lock file


def test_resume_refuses_another_config_naming_the_keys(tmp_path):
    with open_run_folder(tmp_path, CONFIG, resume=False) as first:
        (tmp_path / "results.json").write_text("{}")
    changed = {**CONFIG, "trainer": {**CONFIG["trainer"], "seed": 1, "lr_router": 0.01}}
    with pytest.raises(
        RunFolderError, match=r"trainer.lr_router: stored 0.003, given 0.01; trainer.seed: stored 0, given 1"
    ):
        open_run_folder(tmp_path, changed, resume=True)
    longer = {**CONFIG, "trainer": {**CONFIG["trainer"], "epochs": 50, "resume": True}, "out_dir": "b"}
    with open_run_folder(tmp_path, longer, resume=True) as again:  # run length and paths may change
        assert again.run_id == first.run_id and again.resumed
    with open_run_folder(tmp_path, changed, resume=False) as fresh:  # a fresh run moves the old one's files aside
        assert fresh.run_id != first.run_id
        assert (tmp_path / f"replaced-{first.run_id}" / "results.json").is_file()
        assert not (tmp_path / "results.json").exists()
    assert differing_keys({"a": {"b": 1}, "logger": {"mode": "x"}}, {"a": {"b": 1}, "logger": {"mode": "y"}}) == []


def test_reentrant_lock_counts_nested_holds(tmp_path):
    lock = FileLock(tmp_path / "x.lock").acquire()
    inner = FileLock(tmp_path / "x.lock").acquire()
    inner.release()
    assert (tmp_path / "x.lock").exists()
    lock.release()
    assert not (tmp_path / "x.lock").exists()


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    return saved_locomo_set(tmp_path_factory.mktemp("runset"), limit=4)


def _train(small_set, out, *overrides, wait=True):
    cmd = [
        sys.executable,
        "scripts/train.py",
        f"graphset={small_set}",
        "logger=none",
        "progress=false",
        "cv.k=3",
        "cv.folds=[0]",
        "trainer.objective.imitation_epochs=1",
        "trainer.objective.rl_epochs=1",
        "trainer.run.device=cpu",
        "baselines=[]",
        f"out_dir={out}",
        f"hydra.run.dir={out}/hydra",
        *overrides,
    ]
    proc = script_runner.ScriptProcess(cmd, cwd=ROOT, env=_env())
    if not wait:
        return proc
    stdout, stderr = proc.communicate(timeout=600)
    return proc.returncode, stdout, stderr


def test_second_training_into_a_live_runs_folder_is_refused_and_files_carry_one_run_id(small_set, tmp_path):
    out = tmp_path / "run"
    first = _train(
        small_set, out, "trainer.objective.imitation_epochs=500", wait=False
    )  # long: still running when the second starts
    deadline, last = time.time() + 300, out / "fold0" / "router" / "last.pt"
    while not last.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the first run is training
    rc, _, err = _train(small_set, out, "trainer.run.seed=1")
    assert first.poll() is None, "the first run ended before the second started"
    first.send_signal(signal.SIGKILL)  # interrupted: its lock is left behind, stale
    first.communicate()
    assert rc == 2, err[-2000:]
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert f"is in use by run {run_id}" in err and err.count("\n") == 1, err[-2000:]
    # resuming with another seed and learning rate is refused, naming both keys
    rc, stale, err = _train(small_set, out, "trainer.run.resume=true", "trainer.run.seed=1", "trainer.optim.lr=0.01")
    assert f"took over the stale lock of run {run_id}" in stale  # the killed run's lock, left behind
    assert (
        rc == 2 and "trainer.optim.lr: stored 0.003, given 0.01" in err and "trainer.run.seed: stored 0, given 1" in err
    )
    # the same run, with another length, resumes under its id; everything it leaves carries that id
    rc, _, err = _train(small_set, out, "trainer.run.resume=true", "trainer.objective.imitation_epochs=1")
    assert rc == 0, err[-2000:]
    results = json.loads((out / "results.json").read_text())
    checkpoints = [torch.load(out / "fold0" / "router" / f, weights_only=True) for f in ("best.pt", "last.pt")]
    assert results["run_id"] == run_id and [c["run_id"] for c in checkpoints] == [run_id, run_id]
    assert results["records"][0]["trainer"]["run"]["seed"] == 0 and results["graphset"]["path"] == str(
        small_set.resolve()
    )


def test_a_second_move_aside_never_lands_on_the_first(tmp_path):
    (tmp_path / "replaced-unrecorded").mkdir()
    (tmp_path / "replaced-unrecorded" / "results.json").write_text("first")  # an earlier move
    (tmp_path / "results.json").write_text("second")  # results no run.json describes
    with open_run_folder(tmp_path, CONFIG, resume=False) as first:
        pass
    (tmp_path / "results.json").write_text("third")
    with open_run_folder(tmp_path, CONFIG, resume=False):
        pass
    assert (tmp_path / "replaced-unrecorded" / "results.json").read_text() == "first"
    assert (tmp_path / "replaced-unrecorded-2" / "results.json").read_text() == "second"
    assert (tmp_path / f"replaced-{first.run_id}" / "results.json").read_text() == "third"


def _training_folder(path: Path, recorded: bool = True) -> str | None:
    """A folder as scripts/train.py leaves it: run.json (when ``recorded``), results and a checkpoint."""
    run_id = None
    if recorded:
        with open_run_folder(path, CONFIG, resume=False, kind="train") as folder:
            run_id = folder.run_id
    (path / "fold0" / "router").mkdir(parents=True)
    (path / "fold0" / "router" / "best.pt").write_bytes(b"checkpoint")
    (path / "results.json").write_text("{}")
    return run_id


@pytest.mark.parametrize("recorded", [True, False])
def test_an_evaluation_never_writes_into_a_training_runs_folder(tmp_path, recorded):
    from tests.one_line_errors import error_line, run_script

    out = tmp_path / "train"
    run_id = _training_folder(out, recorded)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    proc = run_script(
        "evaluate.py", "policies=[dense_topk]", f"graphset={tmp_path / 'no-set'}", f"out_dir={out}", tmp_path=tmp_path
    )
    line = error_line(proc)
    assert f"out_dir {out} holds " in line and "a training run (scripts/train.py)" in line
    assert f"run {run_id}," in line if recorded else "an unrecorded run" in line
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before  # nothing moved, nothing written


def test_a_training_run_never_writes_into_an_evaluations_folder(tmp_path):
    with open_run_folder(tmp_path, CONFIG, resume=False, kind="evaluate") as folder:
        (tmp_path / "questions_dense_topk.jsonl").write_text("{}\n")
    for kind in ("train", "train_gnn"):
        with pytest.raises(RunFolderError, match=rf"holds run {folder.run_id}, an evaluation \(scripts/evaluate.py\)"):
            open_run_folder(tmp_path, CONFIG, resume=False, kind=kind)
    assert json.loads((tmp_path / "run.json").read_text())["run_id"] == folder.run_id


@pytest.mark.parametrize("recorded", [True, False])
def test_no_run_writes_into_a_training_runs_checkpoint_folder_or_below_a_run(tmp_path, recorded):
    out = tmp_path / "train"
    run_id = _training_folder(out, recorded)
    with pytest.raises(RunFolderError, match=r"router holds best.pt, the checkpoint folder of a training run"):
        open_run_folder(out / "fold0" / "router", CONFIG, resume=False, kind="evaluate")
    if recorded:
        with pytest.raises(RunFolderError, match=rf"lies inside {out}, the folder of run {run_id}, a training run"):
            open_run_folder(out / "fold0" / "eval", CONFIG, resume=False, kind="evaluate")
    assert not (out / "fold0" / "router" / "run.json").exists() and not (out / "fold0" / "eval").exists()
