"""Shared test setup: offline everything, small real data from ../shared/data."""

import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread for the tests and every script they start (set before torch is imported): the
# tests' tensors are small, and on a shared 2-core machine a second OpenMP thread spinning at each
# barrier while its core is busy elsewhere made some runs 15x slower. Tests that need two threads
# (test_determinism) ask for them; idle OpenMP threads then sleep instead of spinning.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The docs' renderers (scripts/docgen/, imported as ``docgen`` as by scripts/make_docs.py) and the benchmarks'
# helpers (scripts/benchmarks/: the policies' per-query references, the scale sweeps, the training throughput,
# imported by their own names as when a benchmark runs).
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path[:0] = [str(SCRIPTS), str(SCRIPTS / "benchmarks")]

# Policies defined in the tests register here, before any test module is collected, so that the
# registry-driven tests (names taken from graphmem.policies.POLICIES) cover them too.
import example_policy  # noqa: E402,F401

import graphmem.config.schemas  # noqa: E402,F401  (registers the config-group schemas; tests compose configs)
import rl.walk  # noqa: E402,F401  (adds the trainer schema: tests compose train without loading its script)
from tests.small_sets import saved_locomo_set  # noqa: E402


@pytest.fixture(scope="session")
def locomo2_set(tmp_path_factory):
    """The first two LoCoMo conversations, built with the hashing encoder and saved once for the session (read it,
    never change it: :func:`set_copy` is the copy a test may damage)."""
    return saved_locomo_set(tmp_path_factory.mktemp("locomo2"), limit=2)


@pytest.fixture
def set_copy(locomo2_set, tmp_path):
    """This test's own copy of :func:`locomo2_set`."""
    return shutil.copytree(locomo2_set, tmp_path / "set")
