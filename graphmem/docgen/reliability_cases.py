"""docs/reliability_cases.md: what each damaged input, unsafe name or mismatched checkpoint does, as measured.

Renders every ``docs/results/reliability_*.json`` (sorted by name), each
``{"command": ..., "cases": [{"case", "command", "exit_code", "outcome"}]}``, as one table.
"""

from __future__ import annotations

from pathlib import Path

from graphmem.docgen.sources import read_json

TITLES = {"sets": "Sets, caches and checkpoints", "runs": "Run folders and run configs"}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(results_dir: Path) -> str:
    """The whole page, from the ``reliability_*.json`` files in ``results_dir``."""
    lines = [
        "# Reliability: nothing silently wrong",
        "",
        "Each row is one case run as its own process on a fresh copy of a small set (HotpotQA, 6 records),",
        "with the exit code and the outcome it printed: the first `error:` line, else the first warning, else",
        "what the case checked afterwards. Exit status 2 is a refused input (one `error:` line, before any",
        "work where the input is a config); temporary folders are shown as `<tmp>`.",
    ]
    for path in sorted(Path(results_dir).glob("reliability_*.json")):
        data = read_json(path)
        topic = path.stem.removeprefix("reliability_")
        lines += ["", f"## {TITLES.get(topic, topic.replace('_', ' ').capitalize())}", ""]
        lines += [f"Made by `{data['command']}` ({path.name}).", ""]
        lines += ["| case | command | exit | outcome |", "|---|---|---|---|"]
        for row in data["cases"]:
            lines.append(
                f"| {_cell(row['case'])} | `{_cell(row['command'])}` | {row['exit_code']} | {_cell(row['outcome'])} |"
            )
    return "\n".join(lines) + "\n"
