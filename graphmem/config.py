"""Typed configs: the project's dataclasses are the schema of its Hydra config groups.

Each dataclass below is registered in Hydra's ConfigStore as ``<group>/schema``, and every YAML
option of that group starts from it::

    # configs/budget/default.yaml
    defaults:
      - schema       # graphmem.policies.base.Budget
      - _self_
    max_entries: 6
    ...

so the YAML files carry values and comments only, and Hydra checks them against the dataclass
when the config is composed: a wrong type (``budget.max_tokens=abc``) or an unknown key (in a
YAML file or on the command line) fails before the script runs, with Hydra's own message naming
the key. Range checks stay in each dataclass's ``__post_init__`` (run by :func:`to_object`).

| group | schema |
|---|---|
| ``budget`` | :class:`graphmem.policies.base.Budget` |
| ``data`` | :class:`graphmem.graphset.DataConfig` |
| ``graph`` | :class:`graphmem.graphset.GraphConfig` |
| ``logger`` | :class:`graphmem.tracking.runs.LoggerConfig` |
| ``llm`` | :class:`graphmem.llm.client.LLMConfig` |
| ``trainer`` | :class:`rl.reinforce.TrainConfig` |

Importing this module registers the schemas; every script imports it before Hydra composes,
and :func:`compose` does it for code that composes configs itself (tests, notebooks).
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
SCHEMA_NAME = "schema"

SCHEMAS: dict[str, str] = {
    "budget": "graphmem.policies.base:Budget",
    "data": "graphmem.graphset:DataConfig",
    "graph": "graphmem.graphset:GraphConfig",
    "logger": "graphmem.tracking.runs:LoggerConfig",
    "llm": "graphmem.llm.client:LLMConfig",
    "trainer": "rl.reinforce:TrainConfig",
}
"""Config group -> ``module:class`` of its schema dataclass."""


def schema_class(group: str) -> type:
    """The dataclass that is the schema of config group ``group``."""
    module, name = SCHEMAS[group].split(":")
    return getattr(import_module(module), name)


def schema_node(cls: type) -> DictConfig:
    """``cls`` as a typed OmegaConf node that YAML values can be merged into.

    A frozen dataclass yields a read-only node; the flag is cleared (the object built by
    :func:`to_object` is frozen again).
    """
    node = OmegaConf.structured(cls)
    OmegaConf.set_readonly(node, False)
    return node


def register_schemas(store: ConfigStore | None = None) -> None:
    """Store every schema of :data:`SCHEMAS` as ``<group>/schema`` (idempotent)."""
    store = store or ConfigStore.instance()
    for group in SCHEMAS:
        store.store(group=group, name=SCHEMA_NAME, node=schema_node(schema_class(group)), provider="graphmem")


def to_object(node: Any) -> Any:
    """The dataclass instance a composed group node describes (its ``__post_init__`` checks run)."""
    return OmegaConf.to_object(node)


def compose(config_name: str, overrides: Sequence[str] = (), config_dir: str | Path = CONFIG_DIR) -> DictConfig:
    """Compose ``configs/<config_name>.yaml`` with ``overrides`` as a script would (schemas registered)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_schemas()
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


register_schemas()
