"""Thread counts: the environment decides, capped by the cores the process may use; no config fixes more than 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml

from graphmem.config.cli import ConfigError, set_threads
from tests.script_loader import config_folder

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ALLOWED = len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def restore_threads(monkeypatch):
    for name in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_unset_environment_gives_one_thread():
    assert set_threads({"threads": None}) == 1 == torch.get_num_threads()
    assert set_threads({}) == 1 and set_threads(None) == 1


def test_environment_is_honoured_and_capped_by_affinity(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", str(ALLOWED))
    assert set_threads({"threads": None}) == ALLOWED == torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", str(64 * ALLOWED))
    assert set_threads({"threads": 0}) == ALLOWED  # never more threads than cores the process may run on
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert set_threads({"threads": 8}) == 1


def test_slurm_cpus_per_task_caps(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert set_threads({}) == 6
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert set_threads({}) == 3
    assert set_threads({"threads": 5}) == 3


@pytest.mark.parametrize(
    ("env", "cfg", "named"),
    [({}, {"threads": "two"}, "threads"), ({}, {"threads": -1}, "threads"), ({"OMP_NUM_THREADS": "x"}, {}, "OMP")],
)
def test_bad_counts_are_refused_by_name(monkeypatch, env, cfg, named):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=named):
        set_threads(cfg)


def _thread_keys(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).endswith("threads"):
                yield f"{path}{k}", v
            yield from _thread_keys(v, f"{path}{k}.")


@pytest.mark.parametrize("name", ["gnn", "writer", "build_index", "head_to_head", "memory_loop", "benchmark"])
def test_no_config_fixes_more_than_one_thread(name):
    keys = dict(_thread_keys(yaml.safe_load((config_folder(name) / f"{name}.yaml").read_text())))
    assert "threads" in keys
    assert all(v in (None, 0, 1) for v in keys.values()), keys


@pytest.mark.parametrize("name", ["scaling", "scaling_ann"])
def test_scale_suites_build_indexes_on_the_run_threads(name):
    keys = dict(_thread_keys(yaml.safe_load((CONFIGS / "suite" / f"{name}.yaml").read_text())))
    assert keys.get("index_threads") is None
