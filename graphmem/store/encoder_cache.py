"""The on-disk cache of encoded texts.

:class:`CachedEncoder` keys each row by ``(encoder name, encoder fingerprint, sha256(text))`` and
stores rows in safetensors shards (no pickle), each written atomically:
``<cache_dir>/<name>-<fingerprint[:16]>/shard-*.safetensors`` holding ``digests`` (``[m, 32]``
uint8) and ``embeddings`` (``[m, d]`` float32), with the full fingerprint
(:func:`graphmem.index.embed.encoder_fingerprint`) and the SHA-256 of both tensors in the header. A
shard of another model or whose tensors differ from their checksum is never used: it is dropped with
a warning and its rows are recomputed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from graphmem.index.embed import Encoder, encoder_fingerprint
from graphmem.store.io import atomic_write

log = logging.getLogger(__name__)


def shard_sha256(digests: Tensor, embeddings: Tensor) -> str:
    """SHA-256 over a shard's two tensors (shape and bytes)."""
    h = hashlib.sha256()
    for t in (digests, embeddings):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def default_cache_dir() -> Path:
    """``$GRAPHMEM_CACHE_DIR`` or ``<repo root>/.cache/embeddings``."""
    env = os.environ.get("GRAPHMEM_CACHE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache" / "embeddings"


def text_digest(text: str) -> bytes:
    """sha256 of the UTF-8 text (32 bytes)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class CachedEncoder:
    """Wrap an encoder with the on-disk cache described in the module docstring.

    Args:
        encoder: the encoder computing cache misses.
        cache_dir: cache root; rows live under ``cache_dir/<sanitised encoder name>-<fingerprint[:16]>/``
            (default: :func:`default_cache_dir`).
        max_shards: shards kept before they are merged into one (default: 32).
    """

    def __init__(self, encoder: Encoder, cache_dir: str | os.PathLike | None = None, max_shards: int = 32):
        self.encoder, self.name, self.dim = encoder, encoder.name, encoder.dim
        self.fingerprint = encoder_fingerprint(encoder)
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder.name)
        self.dir = Path(cache_dir or default_cache_dir()) / f"{safe}-{self.fingerprint[:16]}"
        self.dropped = 0
        self.max_shards = max_shards
        self.hits = self.misses = 0
        self._index: dict[bytes, Tensor] | None = None

    def _load_index(self) -> dict[bytes, Tensor]:
        if self._index is None:
            self._index = {}
            shards = sorted(self.dir.glob("shard-*.safetensors"))
            for shard in shards:
                why = self._refusal(shard)
                if isinstance(why, str):
                    log.warning("embedding cache %s: %s; dropped, its rows will be recomputed", shard, why)
                    shard.unlink(missing_ok=True)
                    self.dropped += 1
                    continue
                dig, emb = why
                for d, row in zip(dig.numpy(), emb):
                    self._index[d.tobytes()] = row
            if len(shards) > self.max_shards and self._index:
                self._write(list(self._index), replace=shards)
        return self._index

    def _refusal(self, shard: Path) -> str | tuple[Tensor, Tensor]:
        """Why ``shard`` may not be used, or its ``(digests, embeddings)`` when it may."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        try:
            data = load_file(str(shard))
            with safe_open(str(shard), framework="pt") as f:
                meta = f.metadata() or {}
        except Exception as err:  # noqa: BLE001 - safetensors raises several types for a bad file
            return f"unreadable ({type(err).__name__})"
        emb, dig = data.get("embeddings"), data.get("digests")
        if emb is None or dig is None or emb.shape[1:] != (self.dim,) or len(dig) != len(emb):
            return "not a shard of this encoder's width"
        if meta.get("model") != self.fingerprint:
            return "written for another model (fingerprint differs)"
        if meta.get("sha256") != shard_sha256(dig, emb):
            return "its rows differ from their checksum (damaged)"
        return dig, emb

    def _write(self, digests: list[bytes], replace: Sequence[Path] = ()) -> None:
        from safetensors.torch import save_file

        index = self._index or {}
        tensors = {
            "digests": torch.tensor([list(d) for d in digests], dtype=torch.uint8),
            "embeddings": torch.stack([index[d] for d in digests]).contiguous(),
        }
        meta = {"model": self.fingerprint, "sha256": shard_sha256(tensors["digests"], tensors["embeddings"])}
        name = hashlib.sha256(b"".join(sorted(digests))).hexdigest()[:24]
        atomic_write(self.dir / f"shard-{name}.safetensors", lambda tmp: save_file(tensors, str(tmp), metadata=meta))
        for old in replace:
            if old.name != f"shard-{name}.safetensors":
                old.unlink(missing_ok=True)

    def encode(self, texts: list[str]) -> Tensor:
        """Cached rows for known texts; the wrapped encoder runs once on the unique misses."""
        index = self._load_index()
        digests = [text_digest(t) for t in texts]
        missing: dict[bytes, str] = {}
        for d, t in zip(digests, texts):
            if d not in index and d not in missing:
                missing[d] = t
        self.misses += len(missing)
        self.hits += len(texts) - sum(1 for d in digests if d in missing)
        level = logging.INFO if len(texts) >= 100 else logging.DEBUG  # a build, not a single curated node
        log.log(level, "%s: %d texts, %d new to encode (cache %s)", self.name, len(texts), len(missing), self.dir)
        if missing:
            rows = torch.as_tensor(self.encoder.encode(list(missing.values())), dtype=torch.float32)
            if rows.shape != (len(missing), self.dim):
                raise ValueError(f"encoder {self.name!r} returned shape {tuple(rows.shape)} for {len(missing)} texts")
            for d, row in zip(missing, rows):
                index[d] = row.clone()
            self._write(list(missing))
        if not texts:
            return torch.empty(0, self.dim)
        return torch.stack([index[d] for d in digests])
