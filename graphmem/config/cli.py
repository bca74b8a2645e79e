"""Shared plumbing of the entry points in ``scripts/``: checks before any work, one-line errors, exit 2;
graph sets, policy configs and the metrics the scripts tabulate.

Every script runs its work through :func:`run_or_exit`, which first checks the whole config
(:func:`preflight`) and turns input errors (config, data, graph, checkpoint, run folder; see
:mod:`graphmem.core.errors`) into one ``error: ...`` line and exit status 2:

* every size-like key lies within its bounds and fits in memory (:mod:`graphmem.config.bounds`);
* every ``device`` (and ``*_devices`` list) must exist here: ``cuda`` needs CUDA, ``cuda:3`` four
  GPUs, ``mps`` Apple's backend;
* every ``api_key_env`` must be the name of an environment variable, not a key (:func:`is_variable_name`:
  upper-case letters, digits and ``_``, words of at most 20 characters, at most 4 digits); any other
  value is refused as a key, in a message that does not repeat it (and scrubbed from Hydra's
  ``.hydra`` dumps); a name that no set variable has gets a warning.

:func:`guard_argv` runs before Hydra parses the command line, so an override whose value looks
like a key is refused before Hydra writes it to ``.hydra/overrides.yaml`` or W&B records the
command line; :func:`graphmem.config.launch.check_command_line` calls it, then composes and checks every
job's config (:func:`preflight` and the script's own checks) before Hydra starts the first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from graphmem.builders import DataConfig, GraphConfig, graphset_dir, open_graphset
from graphmem.config.bounds import check_bounds
from graphmem.config.schemas import CONFIG_DIR, policy_option
from graphmem.core.errors import InputError, NothingMeasuredError

_KEY_PREFIXES = ("sk-", "sk_", "rk_", "hf_", "ghp_", "gho_", "ghs_", "github_pat_", "glpat-", "xox", "AKIA", "AIza")
_VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")

# the test-set metrics the training and comparison scripts tabulate
METRICS = ("evidence_recall", "all_evidence_hit", "precision", "loaded_tokens")


class ConfigError(ValueError):
    """The run config is invalid; raised before any work is done."""


def looks_like_key(value: Any) -> bool:
    """True for a string shaped like an API key: a known provider prefix, or 32+ mixed-case alphanumerics."""
    if not isinstance(value, str):
        return False
    v = value.strip()
    if len(v) >= 12 and v.startswith(_KEY_PREFIXES):
        return True
    mixed = re.search(r"[a-z]", v) and re.search(r"[A-Z]", v) and re.search(r"[0-9]", v)
    return len(v) >= 32 and bool(re.fullmatch(r"[A-Za-z0-9_\-.]+", v)) and bool(mixed)


def is_variable_name(value: Any) -> bool:
    """True for a conventional environment-variable name such as ``OPENAI_API_KEY``, the only values
    ``api_key_env`` accepts.

    The name is ``[A-Z_][A-Z0-9_]*`` of at most 64 characters, no ``_``-separated word is longer than
    20 characters, and it holds at most 4 digits. Keys fail these: they mix lower case in
    (``sk-...``, lower-case hex), or run 32+ characters without a separator, or are dense in digits
    (upper-case hex or base32: a 32-character hex key holds about 20 digits).
    """
    if not isinstance(value, str) or not _VARIABLE_NAME.fullmatch(value) or looks_like_key(value):
        return False
    return max(len(word) for word in value.split("_")) <= 20 and sum(c.isdigit() for c in value) <= 4


def check_device(value: Any, key: str) -> None:
    """Refuse a device ``value`` (of config ``key``) that this machine does not have."""
    if value in (None, "", "auto"):
        return
    import torch

    try:
        dev = torch.device(str(value))
    except (RuntimeError, ValueError):
        raise ValueError(f"{key}={value!r} is not a device (cpu, cuda, cuda:<n>, mps or auto)") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"{key}={value!r}: CUDA is not available on this machine (torch {torch.__version__}); "
                f"use {key}=cpu or {key}=auto"
            )
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"{key}={value!r}: this machine has {count} CUDA device(s)")
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"{key}={value!r}: the MPS backend is not available on this machine; use {key}=cpu")


def check_api_key_env(value: Any, key: str) -> str | None:
    """Refuse an ``api_key_env`` holding a key; return a warning when it names no set variable."""
    if value in (None, ""):
        return None
    if not is_variable_name(value):
        raise ValueError(
            f"{key} must name the environment variable that holds the key (an upper-case name such as "
            "OPENAI_API_KEY), and this value looks like a key itself: export it as a variable instead "
            "(the value was not written anywhere)"
        )
    if not os.environ.get(str(value)):
        return f"warning: {key}={value} names no set environment variable: calls to that model go without a key"
    return None


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, value


def preflight(cfg: Any, quiet: bool = False) -> list[str]:
    """Check every device and ``api_key_env`` in ``cfg`` (module docstring); returns the warnings
    (printed unless ``quiet``)."""
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra-core is a core dependency
        DictConfig = ()  # type: ignore[assignment]
    if DictConfig and isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    if not isinstance(cfg, dict):
        return []
    warnings = []
    for key, value in _leaves(cfg):
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "device" or re.fullmatch(r"\w*devices\[\d+\]", leaf):
            check_device(value, key)
        elif leaf == "api_key_env":
            try:
                warning = check_api_key_env(value, key)
            except ValueError:
                _scrub_hydra_dumps(str(value))
                raise
            if warning:
                warnings.append(warning)
                if not quiet:
                    print(warning, file=sys.stderr)
    return warnings


def _scrub_hydra_dumps(secret: str) -> None:
    """Replace ``secret`` in the run's ``.hydra/*.yaml`` (Hydra wrote them before the task started)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized() or not HydraConfig.get().output_subdir:
            return
        from pathlib import Path

        folder = Path(HydraConfig.get().runtime.output_dir) / HydraConfig.get().output_subdir
    except Exception:  # noqa: BLE001 - no Hydra run: nothing was dumped
        return
    for path in folder.glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        if secret in text:
            path.write_text(text.replace(secret, "<redacted>"), encoding="utf-8")


def guard_argv(argv: list[str] | None = None) -> None:
    """Exit 2 when a command-line override's value looks like an API key (call before ``main()``)."""
    for arg in sys.argv[1:] if argv is None else argv:
        key, sep, value = arg.partition("=")
        if not sep:
            continue
        key = key.lstrip("+~")
        if "${" in value:  # an interpolation: resolved, and checked, by preflight inside the run
            continue
        named = key.endswith("api_key_env") and value not in ("", "null")
        if looks_like_key(value) or (named and not is_variable_name(value)):
            print(
                f"error: {key}: the value looks like an API key; export the key as an environment variable and "
                "give the variable's name to api_key_env instead (nothing was written)",
                file=sys.stderr,
            )
            sys.exit(2)


def check_int(cfg: Any, key: str, minimum: int | None = None) -> int:
    """The integer at dotted ``key`` of ``cfg``; ``ConfigError`` naming the key when it is none (or < ``minimum``)."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key)
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ConfigError(f"{key} must be an integer{bound}, got {value!r}")
    return value


def check_out_dir(path: str | Path, key: str = "out_dir") -> Path:
    """``path`` as the folder of a run's outputs; :class:`ConfigError` when it, or a folder above it, is a file."""
    path = Path(path)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                what = "is" if folder == path else f"lies under {folder}, which is"
                raise ConfigError(f"{key}={path} {what} an existing file, not a folder: choose a folder for outputs")
            break
    return path


def check_run_bounds(cfg: Any) -> None:
    """:func:`graphmem.config.bounds.check_bounds` of ``cfg`` as the config of the running Hydra job (its
    ``config_name``); nothing outside a Hydra run (the config's name is not known there)."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:  # pragma: no cover - hydra-core is a core dependency
        return
    if not HydraConfig.initialized() or not HydraConfig.get().job.get("config_name"):
        return

    check_bounds(HydraConfig.get().job.config_name, cfg)


def run_or_exit(run: Callable[[Any], Any], cfg: Any, errors: tuple[type[BaseException], ...] = ()) -> Any:
    """:func:`preflight`, then ``run(cfg)``; an input error prints one ``error: ...`` line and exits with status 2.

    Input errors are ``ValueError``, ``KeyError``, :class:`graphmem.core.errors.InputError` and ``errors``;
    a :class:`graphmem.core.errors.NothingMeasuredError` (every LLM call failed) exits with status 3.
    Scripts check their whole config before any work, so config errors arrive before anything is
    loaded; data, graph, checkpoint and run-folder errors name the file, record or field.
    """
    try:
        preflight(cfg)
        check_run_bounds(cfg)
        return run(cfg)
    except (NothingMeasuredError, ValueError, KeyError, InputError, *errors) as err:
        sys.exit(report_error(err))


def report_error(err: BaseException) -> int:
    """Print ``err`` as one ``error: ...`` line on stderr; returns the exit status: 3 for a
    :class:`~graphmem.core.errors.NothingMeasuredError` (every LLM call failed), else 2."""
    print(f"error: {' '.join(str(err).split()) or type(err).__name__}", file=sys.stderr)
    return 3 if isinstance(err, NothingMeasuredError) else 2


def saved_dataset_kind(path: Path) -> str | None:
    """The dataset kind a saved set was built from (``manifest.json``: ``provenance.dataset``, else ``dataset``;
    a pooled HotpotQA set is ``hotpotqa``); ``None`` when the manifest cannot be read."""
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        return (manifest.get("provenance") or {}).get("dataset") or manifest.get("dataset")
    except (OSError, ValueError, AttributeError):
        return None


def check_graphset_data(cfg: Any) -> None:
    """Refuse a ``data=`` (or ``data.name=``) given on the command line that names another dataset
    than the saved ``graphset=`` holds (its ``manifest.json`` field ``provenance.dataset``, the dataset kind:
    ``hotpotqa`` for a pooled HotpotQA set too): :class:`ConfigError`.

    The default ``data`` of a script's config is not a choice, so without such an override the saved
    set's own dataset is used (with a note); a manifest that cannot be read is left to the set's loader."""
    if not cfg.get("graphset") or cfg.get("data") is None:
        return
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    given = [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]
    if "data" not in given and "data.name" not in given:
        return
    import hydra

    path = Path(hydra.utils.to_absolute_path(str(cfg.graphset)))
    holds = saved_dataset_kind(path)
    if holds is not None and holds != cfg.data.get("name"):
        raise ConfigError(
            f"data={cfg.data.get('name')} contradicts graphset={cfg.graphset}, which holds a {holds!r} set "
            f"({path / 'manifest.json'} field 'provenance.dataset'): give data={holds} or leave data out"
        )


def load_graphset(cfg: Any, data: Mapping | None = None, graph: Mapping | None = None):
    """The graph set of a script's config: the saved set at ``cfg.graphset`` when given, else
    ``load_or_build`` of ``data`` / ``graph`` (default: ``cfg.data`` / ``cfg.graph``) cached under
    ``cfg.graphset_dir``. Paths are relative to the launch directory."""
    import hydra
    from omegaconf import OmegaConf

    if data is None:
        check_graphset_data(cfg)
    saved = hydra.utils.to_absolute_path(cfg.graphset) if cfg.get("graphset") else None
    return open_graphset(
        saved,
        OmegaConf.to_container(cfg.data, resolve=True) if data is None else dict(data),
        OmegaConf.to_container(cfg.graph, resolve=True) if graph is None else dict(graph),
        hydra.utils.to_absolute_path(cfg.graphset_dir),
        progress=bool(cfg.get("progress", True)),
    )


def graphset_location(cfg: Any) -> Path:
    """The folder of the saved graph set a script's config reads: ``graphset`` when set, else the
    folder ``load_or_build`` uses under ``graphset_dir`` for ``data`` and ``graph``."""
    from omegaconf import OmegaConf

    def absolute(path: str) -> Path:
        from hydra.utils import to_absolute_path

        try:
            return Path(to_absolute_path(path))
        except ValueError:  # no Hydra run: relative to the working directory
            return Path(path).resolve()

    if cfg.get("graphset"):
        return absolute(cfg.graphset)
    data = DataConfig.from_mapping(OmegaConf.to_container(cfg.data, resolve=True))
    graph = GraphConfig.from_mapping(OmegaConf.to_container(cfg.graph, resolve=True))
    return graphset_dir(absolute(cfg.graphset_dir), data, graph)


def policy_config(name: str, selected: Any = None) -> dict[str, Any]:
    """The config of policy ``name``: its class under ``_target_`` and its keyword arguments.

    From the selected ``policy`` config group when it is that policy (``selected.name``, derived
    from its ``_target_``, so ``policy._target_=mypkg.MyPolicy`` selects a user's class), else
    ``configs/policy/<name>.yaml`` on its schema, else ``{"_target_": name}`` (a policy registered
    elsewhere, with its defaults). :func:`graphmem.policies.make_policy` makes it."""
    from omegaconf import OmegaConf

    path = CONFIG_DIR / "policy" / f"{name}.yaml"
    if selected is not None and selected.get("name") == name:
        raw = OmegaConf.to_container(selected, resolve=True)
    elif path.is_file():
        raw = OmegaConf.to_container(policy_option(path), resolve=True)
    else:
        raw = {"_target_": name}
    return {k: v for k, v in raw.items() if k != "name"}


def restrict_graphs(gs, graphs: str | Sequence[str] | None, part: str = "test"):
    """The graph set ``gs`` with only the graphs ``graphs`` (names, in that order, or a split JSON
    file such as ``<checkpoint>.split.json`` whose list ``part`` is used) and the questions asked
    over them, with their embedding rows; ``None`` or empty: ``gs`` itself."""
    if not graphs:
        return gs
    names = split_names(graphs, part) if isinstance(graphs, str) else [str(n) for n in graphs]
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


def split_names(path: str | Path, part: str = "test", key: str = "graphs", part_key: str = "graphs_part") -> list[str]:
    """The graph names of list ``part`` of the split JSON file ``path`` (``<checkpoint>.split.json``,
    relative to the launch directory); :class:`ConfigError` naming the file (config ``key``) when it
    is missing, empty or not such a file, and ``part_key`` when it lacks the list."""
    import hydra

    try:
        file = Path(hydra.utils.to_absolute_path(str(path)))
    except ValueError:  # no Hydra run: relative to the working directory
        file = Path(path).resolve()
    if not file.is_file():
        raise ConfigError(f"{key}={path}: no such split file ({file}); give graph names or a <checkpoint>.split.json")
    try:
        split = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        what = "is empty" if not file.read_bytes().strip() else f"is not valid JSON ({err})"
        raise ConfigError(f"{key}={path}: {file} {what}; a split file maps train/val/test to graph names") from None
    lists = sorted(k for k, v in split.items() if isinstance(v, list)) if isinstance(split, dict) else []
    if not lists:
        raise ConfigError(f"{key}={path}: {file} holds no lists of graph names (a split file maps train/val/test)")
    if part not in lists:
        raise ConfigError(f"{part_key}={part!r}: {file} has no list {part!r}; its lists: {lists}")
    names = split[part]
    if not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{key}={path}: list {part!r} of {file} holds values that are not graph names")
    return names


def name_list(value: Any, key: str) -> list[str]:
    """A config value that lists names: a list as it is, a single name as a one-element list
    (``policies=beta_bfs``); :class:`ConfigError` naming ``key`` for anything else."""
    from omegaconf import ListConfig, OmegaConf

    if isinstance(value, ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{key}={value!r}: must be a policy name or a list of names, e.g. {key}=[beta_bfs,ppr]")


def config_list(cfg: Any, key: str, example: str = "") -> list:
    """The list at dotted ``key`` of a script's config as plain values (``[]`` when absent or null);
    :class:`ConfigError` naming ``key`` for any other value (a name given where a list belongs)."""
    from omegaconf import ListConfig, OmegaConf

    value = OmegaConf.select(cfg, key)
    if value is None:
        return []
    if not isinstance(value, (ListConfig, list, tuple)):
        raise ConfigError(f"{key}={value!r}: must be a list{example}")
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, ListConfig) else list(value)


def set_threads(cfg) -> int:
    """Size torch's intra-op and inter-op threads and FAISS's OpenMP threads for this process; returns the count.

    ``n = min(requested, allowed)``, at least 1, where ``requested`` is ``cfg.threads`` when set (a positive
    integer; ``null`` or ``0``: from the environment), else ``$OMP_NUM_THREADS``, else **1**; and ``allowed``
    is the number of cores the process may run on (``os.sched_getaffinity``, not ``os.cpu_count``), capped by
    ``$SLURM_CPUS_PER_TASK`` when set. The default of one thread when ``OMP_NUM_THREADS`` is unset (also
    torchrun's) is measured: with one other busy process on a 2-core machine, a training step at the affinity
    count (what a fixed ``threads: 2`` did) took 12x as long as at ``OMP_NUM_THREADS=1``, and the default
    1.02x, since every parallel op waits for the thread that lost its core (``python scripts/benchmarks/bench_train.py
    --cliff``, docs/results/thread_cliff.json); where more cores are free, ``OMP_NUM_THREADS`` hands them out.
    Inter-op threads can be set once per process, before any parallel work: later calls leave them as they are.
    """
    import torch

    def positive(value, name: str) -> int:
        try:
            n = int(str(value).strip())
        except ValueError:
            n = 0
        if n < 1:
            raise ConfigError(f"{name}: expected a positive number of threads, got {value!r}")
        return n

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if os.environ.get("SLURM_CPUS_PER_TASK"):
        allowed = min(allowed, positive(os.environ["SLURM_CPUS_PER_TASK"], "SLURM_CPUS_PER_TASK"))
    requested = cfg.get("threads") if cfg is not None else None
    if requested not in (None, 0, "0"):
        n = positive(requested, "threads")
    elif os.environ.get("OMP_NUM_THREADS"):
        n = positive(os.environ["OMP_NUM_THREADS"], "OMP_NUM_THREADS")
    else:
        n = 1
    n = max(1, min(n, allowed))
    torch.set_num_threads(n)
    if torch.get_num_interop_threads() > n:
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:  # parallel work already ran in this process: torch keeps its pool
            pass
    if "faiss" in sys.modules:  # graphmem.index.vector_index also follows torch's count at each build
        sys.modules["faiss"].omp_set_num_threads(n)
    return n
