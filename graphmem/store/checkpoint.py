"""What a trained checkpoint knows of its inputs, and the checks made before it runs on a graph set.

Every trainer stores :func:`checkpoint_inputs` under the key ``"inputs"`` of its checkpoint:

    encoder              name of the encoder the training set's embeddings came from
    encoder_fingerprint  :func:`graphmem.index.embed.encoder_fingerprint` of that encoder
    embedding_dim        D of those embeddings
    graphset_config_hash the training set's config hash
    train_graphs         graph names trained on
    val_graphs           graph names the checkpoint was selected on

:func:`check_inputs` refuses (:class:`CheckpointError`, one line naming the file) a set built with
another encoder or of another embedding size, and warns when the evaluated graphs include graphs
the checkpoint was trained or selected on (refuses with ``strict_split``, which also refuses a checkpoint
that records no inputs: what it was trained on cannot be checked).
:func:`require_checkpoint` refuses a checkpoint path that is no file, naming the config key.

Every checkpoint is written by :func:`save_checkpoint` and read by :func:`load_checkpoint`. The file is
one ``torch.save``'d dict of tensors and plain containers:

    format   :data:`FORMAT`
    kind     what it holds: ``"walk"`` (the walk router, :mod:`rl.walk.trainer`), ``"gnn"`` (the GNN reader)
    inputs   the :func:`checkpoint_inputs` record (or ``None``)
    sha256   :func:`state_digest` of every other entry
    ...      the caller's state

It is written atomically (:func:`graphmem.store.io.atomic_write`) and read with ``torch.load(weights_only=True)``
(no pickled code runs), on the CPU; the loader recomputes the digest and refuses, in one line naming
the file, a file that is no checkpoint, truncated, of another kind or another run, of an older format
(no checksum), whose tensors or values differ from what was written, or whose floating-point tensors
hold a NaN or infinite value (a diverged training: :mod:`rl.common.divergence` stops such a run first).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from graphmem.core.errors import InputError
from graphmem.store.io import atomic_write

log = logging.getLogger(__name__)

FORMAT = "graphmem-checkpoint-v2"
_OLD_FORMATS = ("graphmem-router-checkpoint-v1",)  # no checksum
_RESERVED = ("format", "kind", "inputs", "sha256")


class CheckpointError(RuntimeError, InputError):
    """A checkpoint that cannot be used here (missing, unsafe, corrupted, or for other inputs)."""


def require_checkpoint(path: str | Path, key: str = "policy.checkpoint") -> Path:
    """``path`` when it is a file, else :class:`CheckpointError` naming ``key`` and the path."""
    if not Path(path).is_file():
        raise CheckpointError(f"{key}={str(path)!r}: no such checkpoint file (train one first, or fix the path)")
    return Path(path)


def checkpoint_inputs(graphset, train_graphs: Iterable[str], val_graphs: Iterable[str] = ()) -> dict[str, Any]:
    """The ``"inputs"`` record of a checkpoint trained on ``graphset``'s graphs ``train_graphs``."""
    prov = graphset.provenance or {}
    return {
        "encoder": prov.get("encoder") or (graphset.stats or {}).get("encoder"),
        "encoder_fingerprint": prov.get("encoder_fingerprint"),
        "embedding_dim": int(graphset.query_embeddings.shape[1]),
        "graphset_config_hash": graphset.config_hash,
        "train_graphs": sorted(set(train_graphs)),
        "val_graphs": sorted(set(val_graphs)),
    }


def check_inputs(path: str | Path, inputs: Mapping[str, Any] | None, graphset, strict_split: bool = False) -> list[str]:
    """Refuse ``graphset`` for a checkpoint trained on other inputs; returns the warnings (module docstring)."""
    if not inputs:
        message = f"{path}: the checkpoint records no inputs (encoder, embedding size, training graphs)"
        if strict_split:  # what it was trained on cannot be known, so neither can a held-out split
            raise CheckpointError(message + ": its split cannot be checked (policy.strict_split=true)")
        return [message + ": unchecked"]
    here = checkpoint_inputs(graphset, ())
    if inputs.get("embedding_dim") != here["embedding_dim"]:
        raise CheckpointError(
            f"{path}: trained on {inputs.get('embedding_dim')}-d embeddings ({inputs.get('encoder')}), the graph set "
            f"has {here['embedding_dim']}-d ({here['encoder']}); use a set built with the checkpoint's encoder"
        )
    theirs, ours = inputs.get("encoder_fingerprint"), here["encoder_fingerprint"]
    if inputs.get("encoder") != here["encoder"] or (theirs and ours and theirs != ours):
        raise CheckpointError(
            f"{path}: trained on embeddings of {inputs.get('encoder')} (fingerprint {str(theirs)[:12]}), the graph "
            f"set's come from {here['encoder']} (fingerprint {str(ours)[:12]}); use a set built with that encoder"
        )
    seen = sorted(set(graphset.graphs) & (set(inputs.get("train_graphs") or ()) | set(inputs.get("val_graphs") or ())))
    if not seen:
        return []
    message = (
        f"{path}: {len(seen)} of the {len(graphset.graphs)} evaluated graphs were used to train or select the "
        f"checkpoint ({', '.join(seen[:3])}{' ...' if len(seen) > 3 else ''}); its scores there are not held out"
    )
    if strict_split:
        raise CheckpointError(message + " (policy.strict_split=true)")
    return [message]


def check_policies(policies: Mapping[str, Any], graphset) -> None:
    """:func:`check_inputs` of every policy that was loaded from a checkpoint; warnings are logged."""
    for policy in policies.values():
        path = getattr(policy, "checkpoint_path", None)
        if path is None:
            continue
        strict = bool(getattr(policy, "strict_split", False))
        for warning in check_inputs(path, getattr(policy, "trained_inputs", None), graphset, strict):
            log.warning("%s", warning)


def state_digest(state: Any) -> str:
    """SHA-256 hex digest of a nested state of tensors, containers and plain values.

    Traversal is deterministic: mappings in the order of ``repr`` of their keys, lists and tuples in
    order, each value under its key path. A tensor adds its dtype, shape and raw bytes (a contiguous
    CPU copy, so the digest is the same wherever it was held); any other leaf its type and ``repr``.
    """
    h = hashlib.sha256()
    _digest_into(h, "", state)
    return h.hexdigest()


def _digest_into(h, key_path: str, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"{key_path}\0tensor\0{t.dtype}\0{tuple(value.shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, Mapping):
        h.update(f"{key_path}\0map\0{len(value)}\0".encode())
        for key in sorted(value, key=repr):
            _digest_into(h, f"{key_path}/{key!r}", value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"{key_path}\0{type(value).__name__}\0{len(value)}\0".encode())
        for i, item in enumerate(value):
            _digest_into(h, f"{key_path}[{i}]", item)
    elif isinstance(value, (set, frozenset)):
        h.update(f"{key_path}\0set\0{sorted(map(repr, value))}\0".encode())
    else:
        h.update(f"{key_path}\0{type(value).__name__}\0{value!r}\0".encode())


def _non_finite(value: Any, key_path: str = "") -> Iterable[tuple[str, int]]:
    """``(key path, count)`` of every floating-point tensor in a nested state that holds NaN or infinite values."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.numel():
            count = int((~torch.isfinite(value)).sum())
            if count:
                yield key_path.lstrip("/"), count
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, f"{key_path}/{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{key_path}[{i}]")


def _reason(err: Exception) -> str:
    """The gist of a ``torch.load`` failure in one short line (the unpickler's own error, not its advice)."""
    text = str(err)
    for advice in ("Check the documentation", "This is an internal miniz error"):
        text = text.split(advice, 1)[0]
    for preamble in ("WeightsUnpickler error:", "from a trusted source."):
        text = text.split(preamble, 1)[-1]
    return " ".join(text.split())[:200] or type(err).__name__


def save_checkpoint(
    path: str | Path, kind: str, state: Mapping[str, Any], inputs: Mapping[str, Any] | None = None
) -> Path:
    """Write ``state`` as a checkpoint of ``kind`` with its ``inputs`` record atomically to ``path``
    (module docstring); the state's own keys must not be ``format``, ``kind``, ``inputs`` or ``sha256``."""
    clash = sorted(set(state) & set(_RESERVED))
    if clash:
        raise ValueError(f"{path}: checkpoint state keys {clash} are reserved; pass kind and inputs as arguments")
    payload = {"format": FORMAT, "kind": kind, "inputs": None if inputs is None else dict(inputs), **state}
    payload["sha256"] = state_digest(payload)
    return atomic_write(path, lambda tmp: torch.save(payload, str(tmp)))


def load_checkpoint(path: str | Path, kind: str, run_id: str | None = None) -> dict[str, Any]:
    """The state of the checkpoint ``path`` of ``kind`` (with its ``format``, ``kind``, ``inputs`` and
    ``sha256`` entries), its tensors on the CPU; :class:`CheckpointError` in one line naming the file
    when it is missing, unreadable, of an older format, of another kind, damaged (its digest differs
    from the recorded one), holding a non-finite tensor or, with ``run_id``, written by another run
    (:mod:`graphmem.store.run_folder`)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError for code objects, RuntimeError for truncated files
        reason = f"not a plain-tensor checkpoint or corrupted: {_reason(err)}"
        raise CheckpointError(f"{path}: refused to load ({reason})") from None
    found = state.get("format") if isinstance(state, dict) else None
    if found in _OLD_FORMATS:
        raise CheckpointError(f"{path}: a {found} file, written before checkpoints carried a checksum; retrain it")
    if found != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} file (no format tag {FORMAT!r}; older checkpoints: retrain)")
    if state.get("kind") != kind:
        raise CheckpointError(f"{path}: a {state.get('kind')!r} checkpoint, not the {kind!r} checkpoint expected here")
    recorded = state.pop("sha256", None)
    if recorded is None:
        raise CheckpointError(f"{path}: records no checksum (field 'sha256'); retrain it")
    if state_digest(state) != recorded:
        raise CheckpointError(
            f"{path}: its tensors or values differ from their checksum (field 'sha256'): damaged after it was "
            "written; restore or retrain it"
        )
    state["sha256"] = recorded
    bad = next(_non_finite(state), None)
    if bad is not None:
        key, count = bad
        raise CheckpointError(
            f"{path}: tensor {key!r} holds {count} NaN or infinite values: written by a training that diverged; "
            "retrain it (a smaller learning rate)"
        )
    if run_id and state.get("run_id") != run_id:
        raise CheckpointError(f"{path}: written by run {state.get('run_id')!r}, not by this run {run_id!r}")
    return state
