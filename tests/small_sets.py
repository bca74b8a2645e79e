"""Small real graph sets for tests: the first conversations of the LoCoMo file, hashing encoder (fast, offline)."""

from pathlib import Path

from graphmem.builders import DataConfig, GraphConfig, build_graphset


def saved_locomo_set(root: Path, limit: int, name: str = "set") -> Path:
    """The first ``limit`` LoCoMo conversations (embedding cache under ``root``), saved to ``root/name``."""
    gs = build_graphset(
        DataConfig(name="locomo", limit=limit),
        GraphConfig(encoder="hashing", cache_dir=str(root / "cache")),
        progress=False,
    )
    return gs.save(root / name)


def short_locomo_set(root: Path, sessions: int = 3, questions: int = 24, name: str = "short", conversations: int = 1):
    """The first ``conversations`` LoCoMo conversations cut to their first ``sessions`` sessions and at most
    ``questions`` of the questions whose evidence lies there (plus one adversarial one and one without evidence),
    built with the live memory's rules (``graph.incremental``, hashing encoder) and saved to ``root/name``: streams
    of seconds."""
    import json

    from graphmem.datasets.paths import data_file

    convs = json.loads(Path(data_file("locomo/locomo_dev8.json")).read_text())[:conversations]
    for conv in convs:
        _cut(conv, sessions, questions)
    file = root / f"{name}.json"
    file.write_text(json.dumps(convs))
    gs = build_graphset(
        DataConfig(name="locomo", file=str(file)),
        GraphConfig(encoder="hashing", incremental=True, cache_dir=str(root / "cache")),
        progress=False,
    )
    return gs.save(root / name)


def _cut(conv: dict, sessions: int, questions: int) -> None:
    """``conv`` (a LoCoMo record) cut in place to its first ``sessions`` sessions and their questions."""
    keep = {f"session_{i}" for i in range(1, sessions + 1)} | {f"session_{i}_date_time" for i in range(1, sessions + 1)}
    conv["conversation"] = {k: v for k, v in conv["conversation"].items() if k in keep or not k.startswith("session")}
    inside = lambda e: e.startswith("D") and int(e[1:].split(":")[0]) <= sessions  # noqa: E731
    qa = [q for q in conv["qa"] if q.get("evidence") and all(inside(e) for e in q["evidence"]) and q["category"] != 5]
    adversarial = [q for q in conv["qa"] if q["category"] == 5 and all(inside(e) for e in q.get("evidence", []))]
    speaker = conv["conversation"]["speaker_a"]
    unresolved = {"question": "Who?", "answer": speaker, "evidence": [], "category": 4}
    conv["qa"] = qa[:questions] + adversarial[:1] + [unresolved]
