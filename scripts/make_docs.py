"""Write the generated docs pages and the README's headline table from the results files in docs/results/.

    python scripts/make_docs.py            # rewrite every generated page and the README's headline table
    python scripts/make_docs.py --check    # write nothing; exit 1 naming every page that is out of date

A page is a module with a constant ``PAGE`` and a function ``render(results_dir) -> str``; its text goes to
``docs/<PAGE>.md``. The pages are the modules of ``scripts/docgen/`` and every ``scripts/studies/<study>/page*.py``,
each loaded by its file path (a module without ``render`` is a helper, not a page; one with ``render`` and no
``PAGE``, or two renderers of one page, is an error). The text between the markers ``<!-- headline:begin -->``
and ``<!-- headline:end -->`` of README.md is ``render_headline(results_dir)`` of ``scripts/docgen/headline.py``.
Each file is written atomically, and only when its text changed. A results file that cannot be read prints one
``error:`` line naming it and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

from graphmem.config.entry import command
from graphmem.core.errors import InputError
from graphmem.store.io import atomic_write

ROOT = Path(__file__).resolve().parents[1]

BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"


def load_module(path: Path) -> ModuleType:
    """The module of the file ``path`` (registered in ``sys.modules`` under a name made from its path)."""
    name = "page_" + "_".join(path.with_suffix("").parts[-2:])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def renderers(files: list[Path]) -> dict[str, Callable[[Path], str]]:
    """Page name -> ``render`` of every module among ``files`` that has one (module docstring)."""
    found: dict[str, Callable[[Path], str]] = {}
    for path in files:
        module = load_module(path)
        render = getattr(module, "render", None)
        if not callable(render):
            continue
        name = getattr(module, "PAGE", None)
        if not isinstance(name, str):
            raise InputError(f"{path}: a page renderer declares no PAGE (the name of its docs page)")
        if name in found:
            raise InputError(f"{path}: page {name!r} is already rendered by another module")
        found[name] = render
    return found


def with_headline(readme: str, table: str, path: Path) -> str:
    """``readme`` with the text between the headline markers replaced by ``table``."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1 or readme.index(BEGIN) > readme.index(END):
        raise InputError(f"{path}: needs one {BEGIN} line followed by one {END} line")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table.strip()}\n{END}{tail}"


def outputs(pages: Path, studies: Path, results: Path, docs: Path, readme: Path) -> dict[Path, str]:
    """Every generated file and the text it should hold."""
    found = renderers(sorted(pages.glob("*.py")) + sorted(studies.glob("*/page*.py")))
    texts = {docs / f"{name}.md": render(results).rstrip("\n") + "\n" for name, render in found.items()}
    headline = load_module(pages / "headline.py").render_headline(results)
    texts[readme] = with_headline(readme.read_text(encoding="utf-8"), headline, readme)
    return texts


def shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    parser.add_argument("--pages", type=Path, default=ROOT / "scripts" / "docgen", help="the renderers' folder")
    parser.add_argument("--studies", type=Path, default=ROOT / "scripts" / "studies", help="the study folders")
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "results", help="the results files")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the pages go")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the file with the headline markers")
    return parser


def write_pages(args: argparse.Namespace) -> int:
    """Write the stale pages, or with ``--check`` name them; 1 when ``--check`` found one."""
    wanted = outputs(args.pages, args.studies, args.results, args.docs, args.readme)
    stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"out of date: {shown(path)} (run python scripts/make_docs.py)")
        return 1 if stale else 0
    for path in stale:
        atomic_write(path, lambda tmp, text=wanted[path]: tmp.write_text(text, encoding="utf-8"))
        print(f"wrote {shown(path)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), write_pages, argv, errors=(OSError,))


if __name__ == "__main__":
    sys.exit(main())
