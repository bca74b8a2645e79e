"""Checks of a script's whole command line before Hydra starts it: every job of a sweep, nothing written yet.

:func:`check_command_line` runs first in :func:`graphmem.config.entry.main`, before Hydra starts the job. It
composes the config of every job the command line asks for, exactly as Hydra will (the overrides, then ``-m``
sweeps split by Hydra's basic sweeper, with ``hydra.sweeper.params``), and checks each one:

* composition errors (``budget.max_nodes=abc``, an unknown key or option) become one
  ``error: <override>: <reason> (key <full key>)`` line;
* :func:`graphmem.config.cli.preflight` (devices, ``api_key_env``), the script's own ``check(cfg)``
  (its config validation, e.g. ``plan_run``) and :func:`graphmem.config.bounds.check_bounds` (the range of
  every size-like key, and what memory it needs) run on every job's config, so a value that fails
  in job 7 of a sweep is refused before job 0 starts, naming job 7;
* in a multirun, two jobs whose ``check`` returns the same output folder are refused (their files
  would overwrite each other).

Any refusal prints one ``error:`` line (prefixed by the job's overrides in a multirun) and exits
with status 2 before Hydra writes ``.hydra/``, ``multirun.yaml`` or a log. Inside the run the same
checks run again (:func:`graphmem.config.cli.run_or_exit`), which covers runs started another way.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from graphmem.config.bounds import check_bounds
from graphmem.config.cli import check_graphset_data, guard_argv, preflight
from graphmem.config.schemas import CONFIG_DIR
from graphmem.core.errors import InputError

# Hydra flags after which the command does not run jobs (help, config printing, completion, rerun)
_NO_JOBS = {"-h", "--help", "--hydra-help", "--info", "-i", "-c", "--cfg", "-p", "--package", "--shell-completion"}
_NO_JOBS_PREFIX = ("-sc", "--shell-completion", "--experimental-rerun", "--info", "--cfg")


def check_command_line(
    config_name: str,
    check: Callable[[Any], Any] | None = None,
    argv: list[str] | None = None,
    errors: tuple[type[BaseException], ...] = (),
    config_dir: str | Path = CONFIG_DIR,
) -> None:
    """Exit 2 with one ``error:`` line when any job of the command line ``argv`` (default:
    ``sys.argv[1:]``) fails composition, :func:`preflight` or ``check`` (module docstring).

    Args:
        config_name: the script's primary config (its ``@hydra.main`` ``config_name``).
        check: the script's config validation, called with each job's config (no ``hydra`` node;
            ``HydraConfig`` is set for the job); its return value, when a path, is the job's
            output folder.
        errors: exception types of ``check`` that are input errors, besides ``ValueError``,
            ``KeyError`` and :class:`~graphmem.core.errors.InputError`.
        config_dir: the folder of ``<config_name>.yaml`` (default: ``configs/``; a study's own folder).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    guard_argv(args)
    if any(a in _NO_JOBS or a.startswith(_NO_JOBS_PREFIX) for a in args):
        return
    multirun, overrides, name = False, [], config_name
    it = iter(args)
    for arg in it:
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg in ("-cn", "--config-name"):
            name = next(it, name)
        elif arg.startswith("--config-name="):
            name = arg.split("=", 1)[1]
        elif arg in ("-cp", "-cd") or arg.startswith(("--config-path", "--config-dir")):
            return  # another config source: the checks inside the run still apply
        elif not arg.startswith("-"):
            overrides.append(arg)
    try:
        _check_jobs(name, overrides, multirun, check, errors, Path(config_dir))
    except _Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        sys.exit(2)


class _Refused(Exception):
    pass


def _one_line(err: BaseException) -> str:
    """The message of ``err`` (and of its cause, for Hydra's composition errors) on one line."""
    parts = [str(err)]
    cause = err.__cause__ or (None if err.__suppress_context__ else err.__context__)  # ``from None``: no cause
    if cause is not None and str(cause) and str(cause) not in parts[0]:
        parts.append(str(cause))
    lines = [line.strip() for part in parts for line in part.strip().splitlines() if line.strip()]
    key = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("full_key:")), None)
    text = ": ".join(line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type=")))
    text = text.replace("Error merging override ", "").replace(".: ", ": ")
    return f"{text} (key {key})" if key and key not in text.split(":")[0] else text or type(err).__name__


def _jobs(
    name: str, overrides: list[str], multirun: bool, config_dir: Path
) -> Iterator[tuple[list[str], Callable[[], Any]]]:
    """``(the job's values of the swept keys, a function composing the job's config with its hydra node)``
    of every job Hydra would run; composing is left to the caller, so an error in it names its own job."""
    from hydra import initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        if not multirun:
            yield [], lambda: loader.load_configuration(name, overrides, run_mode=RunMode.RUN)
            return
        master = loader.load_configuration(name, overrides, run_mode=RunMode.MULTIRUN)
        params = [f"{k}={v}" for k, v in (master.hydra.sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides([*params, *master.hydra.overrides.task])
        swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
        for batch in BasicSweeper.split_arguments(parsed, None):
            for job in batch:
                shown = [o for o in job if o.split("=", 1)[0] in swept]
                yield shown, lambda job=job: loader.load_sweep_config(master, list(job))


def _check_jobs(name, overrides, multirun, check, errors, config_dir: Path) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict, read_write
    from omegaconf.errors import OmegaConfBaseException

    folders: dict[Path, str] = {}
    job, jobs = [], _jobs(name, overrides, multirun, config_dir)
    script = Path(sys.argv[0]).stem or name
    try:
        for num, (job, compose_job) in enumerate(jobs):
            cfg = compose_job()
            with open_dict(cfg):
                cfg.hydra.job.name = script
                cfg.hydra.job.num, cfg.hydra.job.id = num, str(num)
                cfg.hydra.mode = RunMode.MULTIRUN if multirun else RunMode.RUN
                cfg.hydra.runtime.output_dir = os.path.abspath(
                    OmegaConf.select(cfg, "hydra.sweep.dir") + "/" + str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
                    if multirun
                    else OmegaConf.select(cfg, "hydra.run.dir")
                )
            HydraConfig.instance().set_config(cfg)
            task = copy.deepcopy(cfg)
            with read_write(task), open_dict(task):
                del task["hydra"]
            preflight(task, quiet=True)
            out = check(task) if check is not None else None
            check_bounds(name, task)  # after the script's own checks, whose messages are more specific
            check_graphset_data(task)
            if multirun and isinstance(out, (str, Path)):
                out = Path(out).resolve()
                if out in folders:
                    raise _Refused(
                        f"jobs ({folders[out]}) and ({' '.join(job)}) would both write into {out}: "
                        "leave out_dir unset in a multirun (each job writes its own sweep folder) or vary it per job"
                    )
                folders[out] = " ".join(job)
    except _Refused:
        raise
    except (HydraException, OmegaConfBaseException, ValueError, KeyError, InputError, *errors) as err:
        where = f"job ({' '.join(job)}): " if multirun and job else ""
        raise _Refused(where + _one_line(err)) from None
    finally:
        jobs.close()
        HydraConfig.instance().cfg = None
