"""Names from a config never put a file outside the run's out_dir (graphmem.store.paths)."""

import os
import sys
from pathlib import Path

import pytest

from graphmem.store.paths import PathNameError, check_name, inside, run_path
from tests.one_line_errors import error_line, run_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "", "-rf", "x" * 121, "a\x00b"])
def test_unsafe_names_are_refused_naming_the_key(name):
    with pytest.raises(PathNameError, match=r"^variants="):
        check_name("variants", name)


@pytest.mark.parametrize("name", ["router", "no_intent", "fold0", "mypkg.MyPolicy", "rl_only-2"])
def test_ordinary_names_pass(name):
    assert check_name("variants", name) == name


def test_run_path_refuses_a_symlink_out_of_the_folder(tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (out / "fold0").symlink_to(victim)
    with pytest.raises(PathNameError, match="outside out_dir"):
        run_path(out, "fold0", "router")
    with pytest.raises(PathNameError):
        run_path(out, "../victim")
    assert run_path(out, "fold1", "router") == out / "fold1" / "router"
    assert inside(out, out / "a" / "b") == out / "a" / "b"


def test_a_variant_named_like_a_path_cannot_overwrite_another_runs_checkpoint(tmp_path):
    victim = tmp_path / "victim" / "fold0" / "router"
    victim.mkdir(parents=True)
    (victim / "best.pt").write_bytes(b"the other run's checkpoint")
    configs = tmp_path / "configs" / "experiment"
    configs.mkdir(parents=True)
    (configs / "escape.yaml").write_text(
        "# @package _global_\nvariants:\n  ../../victim/fold0/router: {}\n", encoding="utf-8"
    )
    proc = run_script(
        "train.py",
        "+experiment=escape",
        f"hydra.searchpath=[file://{tmp_path / 'configs'}]",
        f"out_dir={tmp_path / 'mine' / 'run'}",
        f"graphset={tmp_path / 'no-set'}",  # refused before the set is read
        tmp_path=tmp_path,
    )
    assert "variants='../../victim/fold0/router' cannot be used" in error_line(proc)
    assert (victim / "best.pt").read_bytes() == b"the other run's checkpoint"


def test_a_policy_named_like_a_path_is_oneerror_line(tmp_path):
    proc = run_script(
        "evaluate.py", "policies=[../x]", f"graphset={tmp_path / 'no-set'}", f"out_dir={tmp_path}/o", tmp_path=tmp_path
    )
    assert "policies='../x' cannot be used" in error_line(proc)


def test_a_fresh_run_never_moves_files_reached_through_a_symlink_out_of_its_folder(tmp_path):
    from graphmem.store.run_folder import open_run_folder

    out, victim = tmp_path / "out", tmp_path / "victim" / "router"
    out.mkdir()
    victim.mkdir(parents=True)
    (victim / "best.pt").write_bytes(b"theirs")
    (out / "fold0").symlink_to(victim.parent)
    with pytest.raises(PathNameError, match="outside out_dir"):
        open_run_folder(out, {"a": 1}, resume=False, artifacts=("fold*/*/best.pt",))
    assert (victim / "best.pt").read_bytes() == b"theirs"


SMALL_SWEEP = [
    "+suite=scaling",
    "suite.sizes=[300]",
    "suite.queries=2",
    "suite.slow_queries=1",
    "suite.rounds=1",
    "suite.serve_repeats=1",
    "suite.ef_search_probe=[]",
    "suite.variants={beta_bfs: {policy: beta_bfs}}",
]


@pytest.mark.parametrize("out_file", ["../x.json", "sub/../../x.json"])
def test_a_benchmark_out_file_outside_out_dir_is_refused_before_the_sweep(tmp_path, out_file):
    out = tmp_path / "bench"
    proc = run_script("benchmark.py", *SMALL_SWEEP, f"suite.out_file={out_file}", f"out_dir={out}", tmp_path=tmp_path)
    assert f"suite.out_file={out_file!r} cannot be used" in error_line(proc)
    assert not list(tmp_path.rglob("x.json")) and not out.exists()


def test_learning_curve_names_stay_inside_the_out_dir(tmp_path, capsys):
    from tests.script_loader import load_script

    main = load_script("results").main
    merged = ROOT / "docs" / "results" / "policy_gradients_locomo.json"
    assert main(["curves", str(merged), "--out-dir", str(tmp_path / "plots"), "--prefix", "../x_"]) == 2
    assert "error: --prefix='../x_' cannot be used" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.png"))


def test_lexical_baseline_set_names_stay_inside_the_runs_folder(tmp_path):
    from tests import script_runner

    script = "scripts/studies/lexical_baselines/run.py"
    cmd = [sys.executable, script, "--walk-set", "../x", "--runs", str(tmp_path / "runs")]
    proc = script_runner.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "--walk-set='../x' cannot be used" in error_line(proc)
    assert not list(tmp_path.iterdir())
