"""What the reliability runners share: their ``--out`` argument, the small LoCoMo set their cases run on, and a
case's outcome line read from what its command printed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.store.io import write_json

ROOT = Path(__file__).resolve().parents[2]


def out_arguments(description: str, name: str) -> argparse.ArgumentParser:
    """A runner's arguments: ``--out``, its results file (default ``docs/results/<name>.json``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / f"{name}.json")
    return parser


def save_locomo_set(tmp: Path, limit: int, name: str = "set", file: str | None = None) -> Path:
    """The first ``limit`` LoCoMo conversations (of ``file``; default: the dataset's file) built with the hashing
    encoder (its cache under ``tmp/cache``) and saved as ``tmp/<name>``."""
    graph = GraphConfig(encoder="hashing", cache_dir=str(tmp / "cache"))
    build_graphset(DataConfig(name="locomo", limit=limit, file=file), graph, progress=False).save(tmp / name)
    return tmp / name


def outcome(lines: list[str], after: Callable[[], str] | None = None) -> str:
    """The first ``error:`` line (and what ``after`` reports), else what ``after`` reports, else the last line;
    marked when a traceback was printed."""
    found = next((x for x in lines if x.startswith("error: ")), None)
    text = found or (after() if after else next((x for x in reversed(lines) if x.strip()), ""))
    if after and found:
        text += "; " + after()
    if any("Traceback" in x for x in lines):
        text += " (with a traceback)"
    return text


def write_cases(out: Path, script: str, records: list[dict]) -> None:
    """The runner's results file: the command that ran it (``scripts/reliability/<script>``) and its cases."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"command": f"python scripts/reliability/{script}", "cases": records})
    print(f"wrote {out}")
