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
the key. Range checks stay in each dataclass's ``__post_init__`` (run by :func:`to_object`); the
bounds of every size-like key of every entry point's config (counts, sizes, epochs, folds, batch
sizes), and the memory such a value would take, are one table in :mod:`graphmem.config.bounds`, checked
when the command line is composed (:func:`graphmem.config.launch.check_command_line`).

| group | schema |
|---|---|
| ``budget`` | :class:`graphmem.policies.base.Budget` |
| ``data`` | :class:`graphmem.builders.registry.DataConfig` |
| ``graph`` | :class:`graphmem.builders.config.GraphConfig` |
| ``logger`` | :class:`graphmem.tracking.runs.LoggerConfig` |
| ``llm`` | :class:`graphmem.llm.client.LLMConfig` |
| ``streaming`` | :class:`graphmem.streaming.StreamConfig` |
| ``trainer`` | :class:`rl.walk.trainer.TrainConfig` (added by :mod:`rl.walk` when it is imported) |
| ``split`` | :class:`rl.common.splits.FoldSplit` (added by :mod:`rl.common` when it is imported; also at ``cv``) |
| ``policy`` | each policy's constructor: ``policy/<name>_schema`` (:func:`policy_schema`) |

A policy option also names its class under ``_target_`` (made with ``hydra.utils.instantiate``,
:func:`graphmem.policies.make_policy`); ``policy._target_=mypkg.MyPolicy`` swaps in a user's
class without editing ``graphmem`` (``+policy.<key>=...`` adds a parameter the schema lacks), and
``policy.name`` follows it (:func:`policy_label`).

Importing this module registers the schemas; every script imports it before Hydra composes,
and :func:`compose` does it for code that composes configs itself (tests, notebooks).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import os
import types
import typing
from importlib import import_module
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from graphmem.policies import POLICIES
from graphmem.policies.base import policy_label

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
SCHEMA_NAME = "schema"
CONFIGS_RESOLVER = "configs_dir"
"""``${configs_dir:}``: the absolute path of ``configs/``, for a study config's ``hydra.searchpath``."""


SCHEMAS: dict[str, str] = {
    "budget": "graphmem.policies.base:Budget",
    "data": "graphmem.builders.registry:DataConfig",
    "graph": "graphmem.builders.config:GraphConfig",
    "logger": "graphmem.tracking.runs:LoggerConfig",
    "llm": "graphmem.llm.client:LLMConfig",
    "streaming": "graphmem.streaming:StreamConfig",
}
"""Config group -> ``module:class`` of its schema dataclass (the trainers add theirs: :func:`add_schema`)."""


def schema_class(group: str) -> type:
    """The dataclass that is the schema of config group ``group``."""
    module, name = SCHEMAS[group].split(":")
    return getattr(import_module(module), name)


def add_schema(group: str, cls: type) -> None:
    """Make ``cls`` the schema of ``group`` and store it: how a package above ``graphmem`` types its
    own group (:mod:`rl.walk` the ``trainer`` group) without ``graphmem`` importing it."""
    SCHEMAS[group] = f"{cls.__module__}:{cls.__qualname__}"
    ConfigStore.instance().store(group=group, name=SCHEMA_NAME, node=schema_node(cls), provider="graphmem")


def schema_node(cls: type) -> DictConfig:
    """``cls`` as a typed OmegaConf node that YAML values can be merged into.

    A frozen dataclass yields a read-only node; the flag is cleared (the object built by
    :func:`to_object` is frozen again).
    """
    node = OmegaConf.structured(cls)
    OmegaConf.set_readonly(node, False)
    return node


def register_schemas(store: ConfigStore | None = None) -> None:
    """Store every schema of :data:`SCHEMAS` as ``<group>/schema`` and every registered policy's as
    ``policy/<name>_schema``; register the ``policy_name`` resolver (idempotent)."""
    store = store or ConfigStore.instance()
    for group in SCHEMAS:
        store.store(group=group, name=SCHEMA_NAME, node=schema_node(schema_class(group)), provider="graphmem")
    for name, cls in policy_schemas().items():
        store.store(group="policy", name=name, node=schema_node(cls), provider="graphmem")
    OmegaConf.register_new_resolver(POLICY_RESOLVER, policy_label, replace=True)
    OmegaConf.register_new_resolver(CONFIGS_RESOLVER, lambda: str(CONFIG_DIR), replace=True)


def to_object(node: Any) -> Any:
    """The dataclass instance a composed group node describes (its ``__post_init__`` checks run)."""
    return OmegaConf.to_object(node)


def compose(config_name: str, overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> DictConfig:
    """Compose ``<config_name>.yaml`` of ``config_dir`` (default ``configs/``; a study's own folder) with
    ``overrides`` as a script would (schemas registered)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_schemas()
    folder = CONFIG_DIR if config_dir is None else Path(config_dir)
    with initialize_config_dir(config_dir=str(folder.resolve()), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


# ---------------------------------------------------------------------------- the policy group
POLICY_RESOLVER = "policy_name"


def _config_type(annotation: Any, default: Any) -> Any:
    """The OmegaConf type of a constructor parameter, or ``None`` when it is not settable from a
    config (an object such as a module or an entry-selector instance).

    Of a union the primitive members count (``str | EntrySelector`` -> ``str``; ``PathLike`` ->
    ``str``; a name or a mapping, as an entry selector's spec, -> ``Any``), ``None`` in it makes the
    field optional; without an annotation the default's type."""
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        return type(default) if isinstance(default, (bool, int, float, str)) else None
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else ()
    members = members or (annotation,)
    optional = type(None) in members
    kept = []
    for m in members:
        if m in (bool, int, float, str):
            kept.append(m)
        elif m in (Path, os.PathLike) or typing.get_origin(m) is os.PathLike:
            kept.append(str)
        elif typing.get_origin(m) in (dict, list):
            kept.append(m)
        elif m is typing.Mapping or typing.get_origin(m) in (collections.abc.Mapping,):
            kept.append(dict)
    if not kept:
        return None
    if str in kept and any(typing.get_origin(m) in (dict, list) or m in (dict, list) for m in kept):
        return Any  # a name or a mapping (an entry selector's spec): OmegaConf has no such union
    kind = str if str in kept else kept[0]
    return Optional[kind] if optional else kind


def policy_schema(cls: type) -> type:
    """The schema of a policy class: a dataclass whose fields are its constructor's config-settable
    parameters (types from the annotations, defaults from the signature), plus ``_target_`` (the
    class, for :func:`hydra.utils.instantiate`) and ``name`` (the reported name, derived from
    ``_target_`` so that ``policy._target_=mypkg.MyPolicy`` renames the run's policy too)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # a name only imported for type checkers: fall back to the defaults
        hints = {}
    fields = [
        ("_target_", str, dataclasses.field(default=f"{cls.__module__}.{cls.__qualname__}")),
        ("name", str, dataclasses.field(default=f"${{{POLICY_RESOLVER}:${{._target_}}}}")),
    ]
    for p in list(inspect.signature(cls).parameters.values()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        kind = _config_type(hints.get(p.name, p.annotation), p.default)
        if kind is None:
            continue
        default = dataclasses.MISSING if p.default is p.empty else p.default
        fields.append((p.name, kind, dataclasses.field(default=default)))
    return dataclasses.make_dataclass(f"{cls.__name__}Config", fields)


def policy_option(path: str | Path) -> DictConfig:
    """A ``configs/policy/*.yaml`` file merged onto the schema its ``defaults`` list names, as Hydra
    would compose it (for a policy that is not the selected ``policy`` group)."""
    raw = OmegaConf.load(path)
    defaults = [d for d in raw.pop("defaults", []) if d != "_self_"]
    node = OmegaConf.create({})
    for name in defaults:
        schema = policy_schemas().get(name)
        if schema is None:
            raise ValueError(f"{path}: unknown schema {name!r} in its defaults list")
        node = OmegaConf.merge(node, schema_node(schema))
    return OmegaConf.merge(node, raw)


def policy_schemas() -> dict[str, type]:
    """``<name>_schema`` -> schema of every registered policy."""
    return {f"{name}_schema": policy_schema(cls) for name, cls in sorted(POLICIES.items())}


register_schemas()
