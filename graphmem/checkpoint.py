"""What a trained checkpoint knows of its inputs, and the checks made before it runs on a graph set.

Every trainer stores :func:`checkpoint_inputs` under the key ``"inputs"`` of its checkpoint:

    encoder              name of the encoder the training set's embeddings came from
    encoder_fingerprint  :func:`graphmem.embed.encoder_fingerprint` of that encoder
    embedding_dim        D of those embeddings
    graphset_config_hash the training set's config hash
    train_graphs         graph names trained on
    val_graphs           graph names the checkpoint was selected on

:func:`check_inputs` refuses (:class:`CheckpointError`, one line naming the file) a set built with
another encoder or of another embedding size, and warns when the evaluated graphs include graphs
the checkpoint was trained or selected on (refuses with ``strict_split``).
:func:`require_checkpoint` refuses a checkpoint path that is no file, naming the config key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

from graphmem.errors import InputError

log = logging.getLogger(__name__)


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
        return [f"{path}: the checkpoint records no inputs (encoder, embedding size, training graphs): unchecked"]
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
