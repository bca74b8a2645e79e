"""What a saved :class:`graphmem.store.graphset.GraphSet` holds, and every check loading makes before using it.

:func:`write_set` commits one generation through :class:`graphmem.store.setstore.SetWriter`: each graph
under its name (:func:`graphmem.store.io.save_graph`), the query embeddings, any extra files, then the
manifest (``manifest_version`` 3) with the set's fields, its provenance, ``graphs`` = name ->
{file, info}, ``queries``, the checksum of every file and of the manifest's own content. The
query embeddings carry, in their file's header, ``qids_sha256`` (:func:`question_binding`) over
the ordered (question id, graph) pairs their rows belong to.

:func:`read_set` refuses, with :class:`graphmem.store.setstore.GraphSetError` naming the file:
a manifest of another version (an older set: rebuild it), without its fields, with a field of the
wrong type, or whose content differs from its checksum; a listed file that is missing or whose size
or SHA-256 differs; a graph file that holds another graph (its saved name) or whose info differs
from its manifest entry; query embeddings that are not finite ``[Q, D]`` floats with the graphs'
``D``, with all-zero rows, or bound to other questions or another order than the manifest's;
duplicate question ids; an empty set.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from graphmem.core.graph import GraphError
from graphmem.datasets.types import LoadReport, Question
from graphmem.store.io import load_graph, save_graph
from graphmem.store.setstore import GraphSetError, SetWriter, file_sha256, read_manifest, verify_content, verify_files

MANIFEST_VERSION = 3  # 2: every file listed with its checksum; 3: the manifest's own checksum, bound query rows
_FIELDS = {"dataset": str, "graphs": dict, "queries": str, "questions": list, "report": dict, "files": dict}
_JSON = {str: "string", dict: "object", list: "array"}
_LOCATION = ("path", "manifest_sha256")  # provenance fields that describe where a set lies, not what it is


def safe_name(name: str) -> str:
    """A file-system-safe, case-insensitively unique file stem for a graph name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80] or "graph"
    if stem != name or stem.lower() != stem:
        stem += "-" + hashlib.sha1(name.encode()).hexdigest()[:10]
    return stem


def graph_files(graphs: Mapping[str, Any], files: Mapping[str, Any], folder: str) -> list[tuple[Any, Any]]:
    """``(graph, path)`` for each of a set's extra ``files`` named ``<folder>/<graph's safe name>/<file>``."""
    by_stem = {safe_name(name): g for name, g in graphs.items()}
    out = []
    for rel, path in files.items():
        parts = Path(rel).parts
        if len(parts) == 3 and parts[0] == folder and parts[1] in by_stem:
            out.append((by_stem[parts[1]], path))
    return out


def question_binding(questions) -> str:
    """SHA-256 over the ordered ``qid<TAB>graph`` lines of ``questions``: what the query rows are bound to."""
    return hashlib.sha256("\n".join(f"{q.qid}\t{q.graph}" for q in questions).encode("utf-8")).hexdigest()


def question_json(q: Question) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(q).items()}


def question_from_json(d: dict) -> Question:
    return Question(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def located(provenance: Mapping[str, Any], directory: Path) -> dict[str, Any]:
    """``provenance`` plus the set's folder and its manifest's SHA-256."""
    return {**provenance, "path": str(directory.resolve()), "manifest_sha256": file_sha256(directory / "manifest.json")}


def write_set(gs, directory: str | Path, extra_files: Mapping[str, Any] | None = None) -> Path:
    """Commit ``gs`` (checked, non-empty) and ``extra_files`` (relative path -> ``write(path)``) to ``directory``."""
    from safetensors.torch import save_file

    directory = Path(directory)
    gs.check(f"GraphSet.save({directory})")
    with SetWriter(directory) as w:
        graphs, lower = {}, set()
        for name, graph in gs.graphs.items():
            stem = safe_name(name)
            if stem.lower() in lower:
                raise ValueError(f"GraphSet.save: graph names collide on disk: {name!r} -> {stem!r}")
            lower.add(stem.lower())
            rel = w.write(f"graphs/{stem}.safetensors", lambda tmp, g=graph, n=name: save_graph(g, tmp, name=n))
            graphs[name] = {"file": rel, "info": graph.info}
        emb = {"query_embeddings": gs.query_embeddings.float().contiguous()}
        binding = {"qids_sha256": question_binding(gs.questions)}
        queries = w.write("queries.safetensors", lambda tmp: save_file(emb, str(tmp), metadata=binding))
        extra = {rel: w.write(rel, write) for rel, write in (extra_files or {}).items()}
        w.commit(
            {
                "manifest_version": MANIFEST_VERSION,
                "dataset": gs.dataset,
                "config_hash": gs.config_hash,
                "provenance": {k: v for k, v in gs.provenance.items() if k not in _LOCATION},
                "graphs": graphs,
                "queries": queries,
                "extra_files": extra,
                "questions": [question_json(q) for q in gs.questions],
                "report": asdict(gs.report),
                "stats": gs.stats,
            }
        )
    gs.files = {rel: directory / stored for rel, stored in extra.items()}
    gs.provenance = located(gs.provenance, directory)
    return directory


def read_set(cls, directory: str | Path):
    """Read and verify the set in ``directory`` as an instance of ``cls`` (module docstring)."""
    directory = Path(directory)
    for attempt in (0, 1):
        manifest = read_manifest(directory)
        try:
            return _read(cls, directory, manifest)
        except GraphSetError:
            if attempt or read_manifest(directory) == manifest:
                raise
            # a writer committed over the set while it was read: read the new one


def _read(cls, directory: Path, manifest: dict | None):
    from safetensors import safe_open
    from safetensors.torch import load_file

    where = directory / "manifest.json"
    if manifest is None:
        raise GraphSetError(f"{directory}: no manifest.json (build the set with scripts/build_graph.py)")
    version = manifest.get("manifest_version")
    if version != MANIFEST_VERSION:
        older = isinstance(version, int) and version < MANIFEST_VERSION
        hint = " (the set predates the current format: no checksum of its own content or of its query rows)"
        raise GraphSetError(
            f"{where}: manifest_version {version!r} is not {MANIFEST_VERSION}{hint if older else ''}; rebuild it "
            "with scripts/build_graph.py force=true"
        )
    verify_content(directory, manifest)
    missing = [k for k in _FIELDS if k not in manifest]
    if missing:
        raise GraphSetError(f"{where}: missing fields {missing}")
    for key, kind in _FIELDS.items():
        if not isinstance(manifest[key], kind):
            raise GraphSetError(
                f"{where}: field '{key}' must be a JSON {_JSON[kind]}, got {type(manifest[key]).__name__}"
            )
    paths = verify_files(directory, manifest)
    graphs = {}
    for name, entry in manifest["graphs"].items():
        if not isinstance(entry, dict) or entry.get("file") not in paths:
            raise GraphSetError(f"{where}: field 'graphs.{name}' must name a file listed under 'files'")
        try:
            graph = load_graph(paths[entry["file"]], name=name)
        except GraphError as err:
            raise GraphSetError(str(err)) from None
        if graph.info != entry.get("info"):
            raise GraphSetError(
                f"{paths[entry['file']]}: graph info {graph.info} differs from its manifest entry "
                f"'graphs.{name}.info' {entry.get('info')}"
            )
        graphs[name] = graph
    if manifest["queries"] not in paths:
        raise GraphSetError(f"{where}: field 'queries' must name a file listed under 'files'")
    queries = paths[manifest["queries"]]
    try:
        emb = load_file(str(queries))["query_embeddings"]
        with safe_open(str(queries), framework="pt") as f:
            bound = (f.metadata() or {}).get("qids_sha256")
    except Exception as err:  # noqa: BLE001 - safetensors raises several types for a bad file
        raise GraphSetError(f"{queries}: no readable query_embeddings tensor ({err})") from None
    try:
        gs = cls(
            dataset=manifest["dataset"],
            graphs=graphs,
            questions=[question_from_json(q) for q in manifest["questions"]],
            query_embeddings=emb,
            report=LoadReport(**manifest["report"]),
            config_hash=manifest.get("config_hash", ""),
            stats=manifest.get("stats", {}),
            provenance=located(manifest.get("provenance") or {}, directory),
            files={rel: paths[stored] for rel, stored in (manifest.get("extra_files") or {}).items()},
        )
    except (TypeError, ValueError) as err:
        raise GraphSetError(f"{where}: {err}") from None
    gs.check(str(directory))
    if bound != question_binding(gs.questions):
        raise GraphSetError(
            f"{queries}: its rows belong to other questions or another order than {where} field 'questions' "
            "lists (questions reordered, replaced or moved to another graph); rebuild the set"
        )
    return gs
