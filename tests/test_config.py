"""Typed configs: each schema'd group's YAML options compose to its dataclass; bad types and keys fail at compose."""

import os
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from graphmem.builders import DataConfig, GraphConfig
from graphmem.config.schemas import CONFIG_DIR, SCHEMAS, schema_class, to_object
from graphmem.core import Budget
from graphmem.llm.client import LLMConfig
from graphmem.tracking import LoggerConfig
from rl.walk.trainer import TrainConfig
from tests import script_runner
from tests.script_loader import compose

ROOT = Path(__file__).resolve().parents[1]
PRIMARY = {
    "budget": "evaluate",
    "data": "evaluate",
    "graph": "evaluate",
    "logger": "evaluate",
    "streaming": "evaluate",
    "llm": "memory_loop",
    "trainer": "train",
    "split": "gnn",
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("group, option", [(g, o) for g in SCHEMAS for o in options(g)])
def test_every_option_declares_its_schema_and_composes_to_it(group, option):
    from omegaconf import OmegaConf

    declared = OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml").get("defaults") or []
    assert declared and declared[-1] == "_self_", f"{group}/{option}.yaml declares no schema"
    cfg = compose(PRIMARY[group], [f"{group}={option}"])
    obj = to_object(cfg[group])
    assert type(obj) is schema_class(group)


def test_schema_classes_are_the_project_dataclasses():
    assert [schema_class(g) for g in ("budget", "data", "graph", "logger", "llm", "trainer")] == [
        Budget,
        DataConfig,
        GraphConfig,
        LoggerConfig,
        LLMConfig,
        TrainConfig,
    ]


@pytest.mark.parametrize(
    "override, error, message",
    [
        ("budget.max_tokens=abc", ValidationError, "could not be converted to Integer"),
        ("budget.max_tokenz=5", ConfigKeyError, "Key 'max_tokenz' not in 'Budget'"),
        ("graph.semantic_threshold=high", ValidationError, "could not be converted to Float"),
        ("data.limit=[1]", ValidationError, "could not be converted to Integer"),
        ("logger.tags=7", ValidationError, "is not a ListConfig"),
        ("policy.device=[1]", ValidationError, "Cannot convert 'list' to string"),
        ("policy.entry_selectr=llm", ConfigKeyError, "Key 'entry_selectr' not in 'BetaBFSConfig'"),
    ],
)
def test_wrong_type_or_unknown_key_fails_at_compose(override, error, message):
    with pytest.raises((ConfigCompositionException, error)) as info:
        compose("evaluate", [override])
    text = str(info.value) + str(info.value.__cause__ or "")
    assert message in text


def test_unknown_key_in_a_yaml_file_fails_at_compose(tmp_path):
    (tmp_path / "budget").mkdir()
    (tmp_path / "budget" / "typo.yaml").write_text("defaults:\n  - schema\n  - _self_\n\nmax_nodez: 3\n")
    (tmp_path / "app.yaml").write_text("defaults:\n  - budget: typo\n  - _self_\n")
    with pytest.raises(ConfigCompositionException) as info:
        compose("app", config_dir=tmp_path)
    assert "In 'budget/typo'" in str(info.value) and "Key 'max_nodez' not in 'Budget'" in str(info.value)


def test_range_checks_stay_in_the_dataclass():
    cfg = compose("evaluate", ["budget.max_tokens=-5"])  # a valid int: composes
    with pytest.raises(ValueError, match="Budget.max_tokens must be a non-negative integer"):
        to_object(cfg.budget)


def test_script_refuses_a_wrong_type_before_any_work(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "scripts/evaluate.py", "budget.max_hops=two", f"out_dir={tmp_path / 'o'}"]
    proc = script_runner.run(cmd, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1  # one line, before Hydra runs anything
    assert proc.stderr.startswith("error: budget.max_hops=two") and "could not be converted to Integer" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_train_refuses_gamma_abc_at_compose_time(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "scripts/train.py", "trainer.objective.gamma=abc", f"out_dir={tmp_path / 'o'}"]
    proc = script_runner.run(cmd, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: trainer.objective.gamma=abc: ")
    assert "Value 'abc' of type 'str' could not be converted to Float" in proc.stderr
    assert not (tmp_path / "o").exists()  # refused before the script ran
    flat = script_runner.run(cmd[:2] + ["trainer.gamma=abc", cmd[3]], cwd=ROOT, env=env, timeout=120)
    assert flat.returncode == 2 and "Could not override 'trainer.gamma'" in flat.stderr  # not a key of the schema
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "primary, overrides, trainer",
    [
        ("train", ["+experiment=ablation"], TrainConfig),
        ("train", ["+experiment=hage_full"], TrainConfig),
        ("head_to_head", ["experiment=beta_vs_router"], TrainConfig),
        ("self_evolve", [], None),
    ],
)
def test_experiments_compose_against_the_schemas(primary, overrides, trainer):
    cfg = compose(primary, overrides)
    if "trainer" in cfg:
        assert type(to_object(cfg.trainer)) is trainer
    assert type(to_object(cfg.data)) is DataConfig


@pytest.mark.parametrize("option", options("policy"))
def test_every_policy_option_is_typed_by_its_constructor(option):
    """``policy/<name>_schema`` is the constructor's signature: a wrong type or unknown key of that
    policy fails at compose time; ``name`` follows ``_target_``."""
    from graphmem.policies import POLICIES

    cfg = compose("evaluate", [f"policy={option}"])
    assert cfg.policy.name == option and POLICIES.resolve(cfg.policy._target_) is POLICIES[option]
    typed = {"ppr": ("alpha", "Float"), "dense_topk": ("oversample", "Integer")}
    if option in typed:
        key, kind = typed[option]
        with pytest.raises(ConfigCompositionException) as info:
            compose("evaluate", [f"policy={option}", f"policy.{key}=abc"])
        assert f"could not be converted to {kind}" in str(info.value.__cause__)


def test_a_user_target_renames_the_policy_and_keeps_the_schema():
    cfg = compose("evaluate", ["policy._target_=tests.user_policy.EntriesOnly"])
    assert cfg.policy.name == "EntriesOnly" and cfg.policy.entry_selector == "embedding"
    assert compose("evaluate", ["policy._target_=graphmem.policies.ppr.PersonalizedPageRank"]).policy.name == "ppr"
