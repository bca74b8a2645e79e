"""``docs/serving_memory.md``: the memory server (``scripts/serve.py``): starting it, auth, limits, every route
with curl, the errors, the Python client, and the load measured in ``docs/results/serve_load.json``."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import field, fill, read_json

PAGE = "serving_memory"
RESULTS = "serve_load.json"


def _loadavg(load: list[float]) -> str:
    return "(" + ", ".join(f"{x:.1f}" for x in load) + ")"


def _load(payload: dict, path: Path) -> list[str]:
    settings = field(payload, path, "settings")
    lines = [
        fill(
            PAGE,
            "load_lead",
            command=field(payload, path, "command"),
            clients=settings["clients"],
            seconds=f"{settings['seconds']:g}",
            memories=settings["memories"],
            encoder=settings["encoder"],
            cpus=field(payload, path, "machine", "cpus"),
            load_start=_loadavg(field(payload, path, "load_average_at_start")),
            load_end=_loadavg(field(payload, path, "load_average_at_end")),
        ),
        "",
        "| route | requests | requests/s | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for route, row in field(payload, path, "routes").items():
        lines.append(
            f"| {route} | {row['n']} | {row['requests_per_s']:.1f} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | "
            f"{row['p99_ms']:.1f} | {row['max_ms']:.1f} |"
        )
    memories = field(payload, path, "memories").values()
    errors = field(payload, path, "errors")
    lines += [
        "",
        fill(
            PAGE,
            "load_note",
            requests=field(payload, path, "requests"),
            elapsed=f"{field(payload, path, 'elapsed_s'):.1f}",
            rate=f"{field(payload, path, 'requests_per_s'):.1f}",
            errors=", ".join(f"{r} {dict(c)}" for r, c in errors.items()) or "none",
            acknowledged=field(payload, path, "writes_acknowledged"),
            lost=field(payload, path, "writes_lost"),
            reopened=sum(m["records_reopened"] for m in memories),
            expected=sum(m["records_expected"] for m in memories),
            problems=sum(len(m["integrity_problems"]) for m in memories),
        ),
    ]
    return lines


def render(results_dir: Path) -> str:
    """The whole page: the guide, then the load table when its results file exists."""
    out = [fill(PAGE, "prose"), "", fill(PAGE, "load"), ""]
    path = Path(results_dir) / RESULTS
    out += (
        _load(read_json(path), path) if path.is_file() else [fill(PAGE, "not_measured", path=f"docs/results/{RESULTS}")]
    )
    return "\n".join(out) + "\n"
