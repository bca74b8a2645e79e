"""The one way a script starts: every entry point and study ends with ::

    if __name__ == "__main__":
        main("build_index", build, errors=(VectorIndexError,))

and :func:`main` does, in order:

1. compose the config of every job the command line asks for (each job of a sweep) and check it before Hydra
   writes anything: :func:`graphmem.config.launch.check_command_line` (composition errors, devices, keys, the
   bounds of every size-like key, the script's own ``check``; one ``error:`` line, exit status 2);
2. run the job under Hydra (``@hydra.main``) with the script's config: ``<config_name>.yaml`` of the script's own
   folder when it holds one (a study's), else of ``configs/``; the job is named after the script (its log file);
3. :func:`graphmem.config.cli.run_or_exit`: the job's checks again, then ``run(cfg)``; an input error is one
   ``error:`` line and exit status 2.

A command that takes flags rather than a config (a results tool, a benchmark, a runner) starts with
:func:`command` instead: the same one-line errors and exit statuses, over ``argparse``.

What a script reads from ``cfg`` it reads typed: a group with a schema (:mod:`graphmem.config.schemas`) is its
dataclass with :func:`typed`, any other node a plain container with :func:`plain`.
"""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Any, Callable, Sequence

import hydra
from omegaconf import OmegaConf

from graphmem.config.cli import CONFIG_DIR, report_error, run_or_exit
from graphmem.config.launch import check_command_line
from graphmem.config.schemas import to_object
from graphmem.core.errors import InputError, NothingMeasuredError


def config_dir(config_name: str, script: str | Path) -> Path:
    """The folder of ``<config_name>.yaml``: the script's own folder when it holds it (a study's), else ``configs/``."""
    here = Path(script).resolve().parent
    return here if (here / f"{config_name}.yaml").is_file() else CONFIG_DIR


def main(
    config_name: str,
    run: Callable[[Any], Any],
    check: Callable[[Any], Any] | None = None,
    errors: tuple[type[BaseException], ...] = (),
) -> None:
    """Check the command line, then run ``run(cfg)`` as the script's Hydra job (module docstring).

    Args:
        config_name: the script's primary config.
        run: the script's work; the file that defines it is the script.
        check: the script's own config validation, called with every job's config before any job runs
            (its return value, when a path, is the job's output folder) (default: none).
        errors: exception types that are input errors besides ``ValueError``, ``KeyError`` and
            :class:`~graphmem.core.errors.InputError` (default: none).
    """
    script = inspect.getfile(run)
    folder = config_dir(config_name, script)
    check_command_line(config_name, check, errors=errors, config_dir=folder)

    def job(cfg: Any) -> Any:
        return run_or_exit(run, cfg, errors=errors)

    job.__module__ = Path(script).stem  # Hydra names the job, and its log file, after the script
    hydra.main(config_path=str(folder), config_name=config_name, version_base="1.3")(job)()


def command(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], int | None],
    argv: Sequence[str] | None = None,
    errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Parse ``argv`` (default: the command line) with ``parser`` and run ``run(args)``; an input error is one
    ``error:`` line (:func:`graphmem.config.cli.report_error`). Returns the exit status: ``run``'s (0 when it
    returns nothing), 2 for an input error, 3 when nothing could be measured."""
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        status = run(args)
    except (NothingMeasuredError, ValueError, KeyError, InputError, *errors) as err:
        return report_error(err)
    return int(status or 0)


def typed(node: Any, cls: type | None = None) -> Any:
    """The dataclass a config node describes: a group with a schema is its own (``OmegaConf.to_object``; its
    ``__post_init__`` checks run), any other node is ``cls`` made from its plain values."""
    if OmegaConf.is_config(node) and OmegaConf.get_type(node) not in (dict, list, None):
        return to_object(node)
    if cls is None:
        raise TypeError("typed: a node without a schema needs the class to make")
    return cls(**plain(node))


def plain(node: Any) -> Any:
    """A config node as plain dicts and lists, interpolations resolved."""
    return OmegaConf.to_container(node, resolve=True)
