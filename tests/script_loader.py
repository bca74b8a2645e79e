"""Import a file under ``scripts/`` (a script, or a module of a study folder ``scripts/studies/<study>/``) as a
module, for tests that call its functions directly."""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
STUDIES = SCRIPTS / "studies"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` (``name`` may name a folder: ``benchmarks/cuda_check``) as module
    ``<file name>_script`` (registered in ``sys.modules``, where dataclasses resolve string annotations)."""
    spec = importlib.util.spec_from_file_location(f"{Path(name).name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def config_folder(config_name: str) -> Path:
    """The folder of ``<config_name>.yaml`` as a script finds it (``graphmem.config.entry.config_dir``): a study's
    own folder ``scripts/studies/<config_name>/`` when it holds it, else ``configs/``."""
    study = STUDIES / config_name
    return study if (study / f"{config_name}.yaml").is_file() else SCRIPTS.parent / "configs"


def compose(config_name: str, overrides=(), config_dir=None):
    """:func:`graphmem.config.schemas.compose` from the folder a script composes from (:func:`config_folder`)."""
    from graphmem.config import schemas

    return schemas.compose(config_name, overrides, config_folder(config_name) if config_dir is None else config_dir)


class _StudyFinder:
    """Finds a top-level module among the files of one study folder, as ``python <folder>/run.py`` would
    (the folder of the script run is the first place Python looks)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        if "." in name or not (self.folder / f"{name}.py").is_file():
            return None
        return importlib.machinery.PathFinder.find_spec(name, [str(self.folder)])


def load_study(study: str, name: str) -> ModuleType:
    """``scripts/studies/<study>/<name>.py`` as module ``<name>`` (``run`` as ``<study>_run``, ``page*`` as
    ``<study>_<name>``), its sibling modules importable by their own names as they are when the study runs."""
    folder = STUDIES / study
    if not any(getattr(f, "folder", None) == folder for f in sys.meta_path):
        sys.meta_path.append(_StudyFinder(folder))
    if name != "run" and not name.startswith("page"):
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(f"{study}_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
