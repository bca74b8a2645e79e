"""Write the generated docs pages and the README's headline table from the results files in docs/results/.

    python scripts/make_docs.py            # rewrite every generated page and the README's headline table
    python scripts/make_docs.py --check    # write nothing; exit 1 naming every page that is out of date

Every module of the package ``graphmem.docgen`` with a function ``render(results_dir) -> str`` is a
page: its text goes to ``docs/<module name>.md``. A module without ``render`` is not a page and is
skipped. Every ``scripts/studies/<study>/page*.py`` with ``render``, loaded by its file path, is a
page too: its text goes to ``docs/<PAGE>.md``, where ``PAGE`` is the module's own constant, else the
study's name; two renderers of one page are an error. The text between the markers
``<!-- headline:begin -->`` and ``<!-- headline:end -->`` of README.md is
``graphmem.docgen.headline.render_headline(results_dir)``. Each file is written atomically, and
only when its text changed. A results file that cannot be read prints one ``error:`` line naming it
and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from typing import Callable

from graphmem.core.errors import InputError
from graphmem.store.io import atomic_write

ROOT = Path(__file__).resolve().parents[1]

BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"


def renderers(package: str) -> dict[str, Callable[[Path], str]]:
    """Page name -> ``render`` of every module of ``package`` that has one, in name order."""
    pkg = importlib.import_module(package)
    found = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        render = getattr(importlib.import_module(f"{package}.{info.name}"), "render", None)
        if callable(render):
            found[info.name] = render
    return found


def study_renderers(studies: Path) -> dict[str, Callable[[Path], str]]:
    """Page name -> ``render`` of every ``<studies>/<study>/page*.py`` that has one, loaded by file path.

    The page name is the module's ``PAGE`` when it declares one, else the study folder's name."""
    found = {}
    for path in sorted(studies.glob("*/page*.py")):
        spec = importlib.util.spec_from_file_location(f"study_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        render = getattr(module, "render", None)
        if callable(render):
            name = getattr(module, "PAGE", path.parent.name)
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


def outputs(package: str, studies: Path, results: Path, docs: Path, readme: Path) -> dict[Path, str]:
    """Every generated file and the text it should hold."""
    found = renderers(package)
    for name, render in study_renderers(studies).items():
        if name in found:
            raise InputError(f"{studies}: page {name!r} is rendered both by {package} and by a study")
        found[name] = render
    pages = {docs / f"{name}.md": render(results).rstrip("\n") + "\n" for name, render in found.items()}
    headline = importlib.import_module(f"{package}.headline").render_headline(results)
    pages[readme] = with_headline(readme.read_text(encoding="utf-8"), headline, readme)
    return pages


def shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    parser.add_argument("--package", default="graphmem.docgen", help="the package of renderers")
    parser.add_argument("--studies", type=Path, default=ROOT / "scripts" / "studies", help="the study folders")
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "results", help="the results files")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the pages go")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the file with the headline markers")
    args = parser.parse_args(argv)
    try:
        wanted = outputs(args.package, args.studies, args.results, args.docs, args.readme)
    except (InputError, ValueError, OSError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"out of date: {shown(path)} (run python scripts/make_docs.py)")
        return 1 if stale else 0
    for path in stale:
        atomic_write(path, lambda tmp, text=wanted[path]: tmp.write_text(text, encoding="utf-8"))
        print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
