"""Sentence vectors computed in a child process at the lowest CPU priority.

The gateway files the vectors of what its compactions removed after each answer
(:mod:`.store_vectors`). Encoding is the costliest work a gateway process does (about 25 ms of
CPU per output), and in a thread of the serving process it competes with the requests twice:
for the cores, and for the interpreter lock, which a thread of low priority holds while the
scheduler keeps it waiting (the requests then wait for it). In a child process run at nice 19
the encoding uses only what the requests leave of the cores, and never holds their lock.

The child runs the same :class:`.embed.Encoder` on the same numpy with one BLAS thread, so a
text gives the same vector bit for bit as in the serving process. It reads texts from its
standard input and writes vectors to its standard output, framed by length; it exits when its
input closes (the gateway stopped, or died). A child that fails, or cannot start, is reported
as an error by :meth:`WorkerEncoder.encode`: the filing fails open (the vectors stay pending,
and a search files them itself).

Run as ``python -m contextfold.evidence.embed_worker`` (the gateway starts it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from ..errors import ContextFoldError

if TYPE_CHECKING:
    from .embed import Matrix

log = logging.getLogger(__name__)

_LEN = struct.Struct("<I")
#: the length a failed encoding is answered with (followed by the error's text)
_FAILED = 0xFFFFFFFF
#: a text longer than this many bytes is cut before it is sent (the encoder reads at most
#: 64 tokens of it anyway)
MAX_TEXT_BYTES = 1 << 20


class EncoderWorkerError(ContextFoldError):
    """The vector encoding child process failed or is gone."""


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError("the other side closed the pipe")
    return data


def _frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


class WorkerEncoder:
    """:meth:`.embed.Encoder.encode` in a child process at nice 19, started on first use and
    again after it died. Safe from several threads (one text at a time goes through the
    pipe)."""

    def __init__(self, command: Sequence[str] | None = None) -> None:
        self.command = list(command or [sys.executable, "-m", __name__])
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.closed = False

    def _child(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        if self.closed:
            raise EncoderWorkerError("the vector encoding process is closed")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        try:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                close_fds=True,
            )
        except OSError as exc:
            raise EncoderWorkerError(f"could not start the vector encoding process: {exc}") from exc
        self._proc = proc
        return proc

    def _one(self, text: str) -> bytes:
        proc = self._child()
        assert proc.stdin is not None and proc.stdout is not None
        data = text.encode("utf-8", "surrogatepass")[:MAX_TEXT_BYTES]
        try:
            proc.stdin.write(_frame(data))
            proc.stdin.flush()
            (size,) = _LEN.unpack(_read_exact(proc.stdout, _LEN.size))
            if size == _FAILED:
                (n,) = _LEN.unpack(_read_exact(proc.stdout, _LEN.size))
                why = _read_exact(proc.stdout, n).decode("utf-8", "replace")
                raise EncoderWorkerError(f"the vector encoding process failed: {why}")
            return _read_exact(proc.stdout, size)
        except (OSError, EOFError, ValueError) as exc:
            self._stop(proc)
            raise EncoderWorkerError(f"the vector encoding process is gone: {exc}") from exc

    def encode(self, texts: Sequence[str], between: Callable[[], None] | None = None) -> Matrix:
        """One unit vector per text, as :meth:`.embed.Encoder.encode` gives it; ``between`` is
        called after each text (what it raises ends the encoding)."""
        import numpy as np

        from .embed import DIM

        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            with self._lock:
                raw = self._one(text)
            vec = np.frombuffer(raw, dtype="<f4")
            if vec.shape != (DIM,):
                raise EncoderWorkerError(f"the vector encoding process sent {len(raw)} bytes")
            out[row] = vec
            if between is not None:
                between()
        return out

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if self._proc is proc:
            self._proc = None

    def close(self) -> None:
        """Stop the child (its input closes, then it is killed if it lingers)."""
        self.closed = True
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            with contextlib.suppress(OSError, ValueError):
                if proc.stdin is not None:
                    proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
            self._stop(proc)


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The child's loop: a framed text in, its vector (float32, little-endian) out."""
    from .embed import encoder

    enc = encoder()
    while True:
        head = stdin.read(_LEN.size)
        if not head or len(head) != _LEN.size:
            return 0
        (size,) = _LEN.unpack(head)
        text = _read_exact(stdin, size).decode("utf-8", "surrogatepass")
        try:
            if enc is None:
                raise RuntimeError("the semantic extra is not installed")
            vec = enc.encode([text])[0]
            stdout.write(_frame(vec.astype("<f4").tobytes()))
        except Exception as exc:  # reported to the parent, which fails open
            why = repr(exc).encode("utf-8", "replace")
            stdout.write(_LEN.pack(_FAILED) + _frame(why))
        stdout.flush()


def main() -> int:
    with contextlib.suppress(OSError):
        os.nice(19)
    # the vectors go to the parent through a copy of standard output; whatever else writes
    # to it (a library's warning) lands on standard error instead
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        return serve(sys.stdin.buffer, out)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
