"""docs/reliability_cases.md: what each damaged input, unsafe name or mismatched checkpoint does, as measured.

Renders every ``docs/results/reliability_*.json`` (sorted by name), each
``{"command": ..., "cases": [{"case", "command", "exit_code", "outcome"}]}``, as one table.
"""

from __future__ import annotations

from pathlib import Path

from docgen.sources import fill, read_json

PAGE = "reliability_cases"

TITLES = {
    "sets": "Sets, caches and checkpoints",
    "runs": "Run folders and run configs",
    "stops": "Runs that stop, bounded inputs, folders that hold one thing",
    "results_and_training": "Diverged and killed trainings, results that would mix runs or overwrite one, questions "
    "of any length",
}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(results_dir: Path) -> str:
    """The whole page, from the ``reliability_*.json`` files in ``results_dir``."""
    lines = [fill(PAGE, "intro")]
    for path in sorted(Path(results_dir).glob("reliability_*.json")):
        data = read_json(path)
        topic = path.stem.removeprefix("reliability_")
        title = TITLES.get(topic, topic.replace("_", " ").capitalize())
        lines += ["", fill(PAGE, "topic", title=title), ""]
        lines += [fill(PAGE, "made_by", command=data["command"], name=path.name), ""]
        timed = any("seconds" in row for row in data["cases"])
        lines += [
            "| case | command | exit | outcome |" + (" seconds |" if timed else ""),
            "|---|---|---|---|" + ("---:|" if timed else ""),
        ]
        for row in data["cases"]:
            cells = [_cell(row["case"]), f"`{_cell(row['command'])}`", str(row["exit_code"]), _cell(row["outcome"])]
            cells += [f"{row['seconds']:.1f}"] if timed else []
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
