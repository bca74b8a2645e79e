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
