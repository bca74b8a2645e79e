"""Import a file under ``scripts/`` as a module, for tests that call a script's functions directly."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` (``name`` may name a folder: ``benchmarks/cuda_check``) as module
    ``<file name>_script`` (registered in ``sys.modules``, where dataclasses resolve string annotations)."""
    spec = importlib.util.spec_from_file_location(f"{Path(name).name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
