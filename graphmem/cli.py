"""Shared plumbing of the Hydra entry points in ``scripts/``: errors, graph sets, policy configs, metrics."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# the test-set metrics the training and comparison scripts tabulate
METRICS = ("evidence_recall", "all_evidence_hit", "precision", "loaded_tokens")


class ConfigError(ValueError):
    """The run config is invalid; raised before any work is done."""


def run_or_exit(
    run: Callable[[Any], Any], cfg: Any, errors: tuple[type[BaseException], ...] = (ValueError, KeyError)
) -> Any:
    """``run(cfg)``; a configuration error prints one ``error: ...`` line and exits with status 2.

    Scripts validate their whole config before any work, so these errors arrive early and a
    traceback would only hide the message.
    """
    try:
        return run(cfg)
    except errors as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def load_graphset(cfg: Any, data: Mapping | None = None, graph: Mapping | None = None):
    """The graph set of a script's config: the saved set at ``cfg.graphset`` when given, else
    ``load_or_build`` of ``data`` / ``graph`` (default: ``cfg.data`` / ``cfg.graph``) cached under
    ``cfg.graphset_dir``. Paths are relative to the launch directory."""
    import hydra
    from omegaconf import OmegaConf

    from graphmem.graphset import open_graphset

    saved = hydra.utils.to_absolute_path(cfg.graphset) if cfg.get("graphset") else None
    return open_graphset(
        saved,
        OmegaConf.to_container(cfg.data, resolve=True) if data is None else dict(data),
        OmegaConf.to_container(cfg.graph, resolve=True) if graph is None else dict(graph),
        hydra.utils.to_absolute_path(cfg.graphset_dir),
        progress=bool(cfg.get("progress", True)),
    )


def policy_config(name: str, selected: Any = None) -> dict[str, Any]:
    """Keyword arguments of policy ``name``: the selected ``policy`` config group when it is that
    policy, else ``configs/policy/<name>.yaml``, else none (a policy registered elsewhere, with its
    defaults). The registry checks them against the constructor when the policy is made."""
    from omegaconf import OmegaConf

    path = CONFIG_DIR / "policy" / f"{name}.yaml"
    if selected is not None and selected.get("name") == name:
        raw = OmegaConf.to_container(selected, resolve=True)
    elif path.is_file():
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    else:
        raw = {}
    return {k: v for k, v in raw.items() if k != "name"}


def restrict_graphs(gs, graphs: str | Sequence[str] | None, part: str = "test"):
    """The graph set ``gs`` with only the graphs ``graphs`` (names, in that order, or a split JSON
    file such as ``<checkpoint>.split.json`` whose list ``part`` is used) and the questions asked
    over them, with their embedding rows; ``None`` or empty: ``gs`` itself."""
    if not graphs:
        return gs
    if isinstance(graphs, str):
        import hydra

        names = json.loads(Path(hydra.utils.to_absolute_path(graphs)).read_text())[part]
    else:
        names = [str(n) for n in graphs]
    missing = sorted(set(names) - set(gs.graphs))
    if missing:
        raise ConfigError(f"graphs not in the graph set: {missing[:5]}")
    keep = [i for i, q in enumerate(gs.questions) if q.graph in set(names)]
    return dataclasses.replace(
        gs,
        graphs={n: gs.graphs[n] for n in names},
        questions=[gs.questions[i] for i in keep],
        query_embeddings=gs.query_embeddings[keep],
    )
