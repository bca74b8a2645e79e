"""What a trained variant of a ``scripts/train.py`` run is, read from its record's trainer config.

A record of a trained variant carries ``trainer`` (the :class:`rl.walk.trainer.TrainConfig` as a dict) and
``history`` (the trainer's per-epoch rows). From ``trainer.objective``:

* ``phases``: ``SL`` (imitation only: ``rl_epochs = 0``), ``SL+RL`` (imitation, then policy gradients) or
  ``RL`` (policy gradients only: ``imitation_epochs = 0``);
* the group it is shown in: ``cost`` when ``token_cost > 0``, else ``answer`` when the reward reads no
  evidence label (``answer`` or ``judge``), else ``sl_rl`` (SL and SL+RL) or ``rl_only`` (RL).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from graphmem.core.errors import InputError

GROUPS = {
    "sl_rl": "evidence reward, imitation then policy gradients, per estimator (and imitation only)",
    "rl_only": "evidence reward, policy gradients only, per estimator",
    "answer": "answer or judge reward (no evidence label), policy gradients only",
    "cost": "token cost with the learned stop",
}


def describe(trainer: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``phases``, ``reward``, ``estimator``, ``group_size``, ``token_cost`` and ``group`` of a trainer config
    (module docstring); a config without these fields is an error naming ``where``."""
    try:
        o = trainer["objective"]
        imitation, rl = int(o["imitation_epochs"]), int(o["rl_epochs"])
        out = {k: o[k] for k in ("reward", "estimator", "group_size", "token_cost")}
    except (KeyError, TypeError) as err:
        raise InputError(f"{where}: its trainer config lacks {err}") from None
    out["phases"] = "SL" if rl == 0 else "RL" if imitation == 0 else "SL+RL"
    if out["token_cost"] > 0:
        out["group"] = "cost"
    elif out["reward"] != "evidence":
        out["group"] = "answer"
    else:
        out["group"] = "rl_only" if out["phases"] == "RL" else "sl_rl"
    return out


def trained_variants(records: Sequence[Mapping[str, Any]], where: str) -> dict[str, dict[str, Any]]:
    """Trained variant -> :func:`describe` of its config, with ``folds`` and ``history`` (fold -> rows), in
    record order; a variant whose config differs between folds is an error naming ``where``."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if "trainer" not in r:
            continue
        name, fold = r["policy"], r["fold"]
        info = describe(r["trainer"], f"{where}: fold {fold} variant {name!r}")
        seen = out.setdefault(name, {**info, "folds": [], "history": {}})
        if any(seen[k] != v for k, v in info.items()):
            raise InputError(f"{where}: variant {name!r} is configured differently in fold {fold}")
        seen["folds"].append(fold)
        seen["history"][fold] = r.get("history")
    return out
