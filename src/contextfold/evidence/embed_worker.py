"""Sentence vectors computed in a child process at the lowest CPU priority.

The gateway files the vectors of what its compactions removed after each answer
(:mod:`.store_vectors`). Encoding is the costliest work a gateway process does (about 25 ms of
CPU per output), and in a thread of the serving process it competes with the requests twice:
for the cores, and for the interpreter lock, which a thread of low priority holds while the
scheduler keeps it waiting (the requests then wait for it). In a child process run at nice 19
the encoding uses only what the requests leave of the cores, and never holds their lock.

The child runs the same :class:`.embed.Encoder` on the same numpy with one BLAS thread, so a
text gives the same vector bit for bit as in the serving process. It reads texts from its
standard input and writes vectors to a pipe of its own, framed by length; it exits when its
input closes (the gateway stopped, or died), and runs in its own session (a Ctrl-C in the
gateway's terminal does not reach it) from the package's folder (nothing in the gateway's
working directory is imported). A child that fails, cannot start, or takes too long is
reported as an error by :meth:`WorkerEncoder.encode` and killed; the filing fails open (the
vectors stay pending, and a search files them itself), and no new child is started for a
back-off that doubles with each failure in a row.

Each serving process has its own child (about 180 MB with the model).

Run as ``python -m contextfold.evidence.embed_worker --out-fd N`` (the gateway starts it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..errors import ContextFoldError

if TYPE_CHECKING:
    import numpy as np

    #: rows of vectors, one a text (as :mod:`.embed` names it)
    Matrix = np.ndarray[tuple[int, int], np.dtype[np.float32]]

log = logging.getLogger(__name__)

_LEN = struct.Struct("<I")
#: the length a failed encoding is answered with (followed by the error's text)
_FAILED = 0xFFFFFFFF
#: the most bytes of an error's text the parent reads
_MAX_WHY = 1 << 16
#: seconds the child may take for one text: its first includes starting and loading the
#: model (a few seconds on a busy machine); a child that takes longer is killed
FIRST_TEXT_SECONDS = 120.0
TEXT_SECONDS = 30.0
#: after a failure no child is started for this long (doubling up to BACKOFF_MAX): a child
#: that dies at start costs a model load each time
BACKOFF_MIN = 1.0
BACKOFF_MAX = 300.0
#: the parent checks whether it is closing this often while it waits for an answer
_POLL = 0.25


class EncoderWorkerError(ContextFoldError):
    """The vector encoding child process failed or is gone."""


def _frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


def _child_env() -> dict[str, str]:
    """The child's environment: BLAS on one thread (as :class:`.embed.Encoder` runs it), and
    the import path as the parent resolved it (the child runs in another folder)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
    return env


def _package_root() -> str:
    """The folder holding this package: the child runs there, so ``python -m`` puts no
    folder of the gateway's own working directory (an agent's workspace) on its path."""
    return str(Path(__file__).resolve().parents[2])


class WorkerEncoder:
    """:meth:`.embed.Encoder.encode` in a child process at nice 19, started on first use and
    again after it died (not sooner than a growing back-off after a failure). Safe from
    several threads (one text at a time goes through the pipes); :meth:`close` from any
    thread ends a wait for the child at once."""

    def __init__(self, command: Sequence[str] | None = None) -> None:
        self.command = list(command or [sys.executable, "-m", __name__])
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = -1  # the read end of the child's answers
        self._answered = False  # the current child answered a text already
        self._failures = 0
        self._retry_at = 0.0
        self.closed = False

    def _child(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        if proc is not None:  # died between two texts
            answered = self._answered
            self._stop(proc)
            if not answered:  # it never answered: count it (a child that works is back)
                self._failed()
        if self.closed:
            raise EncoderWorkerError("the vector encoding process is closed")
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            raise EncoderWorkerError(
                f"the vector encoding process failed {self._failures} times in a row; "
                f"not started again for {wait:.0f} s"
            )
        # the answers come through a pipe of their own: what the child's start-up prints to
        # its standard output (a sitecustomize, a warning) never reaches the parent
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(
                [*self.command, "--out-fd", str(write_end)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                env=_child_env(),
                cwd=_package_root(),
                close_fds=True,
                pass_fds=(write_end,),
                bufsize=0,
                # its own session: a Ctrl-C in the gateway's terminal is the gateway's to
                # handle; the child ends when its input closes
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_end)
            self._failed()
            raise EncoderWorkerError(f"could not start the vector encoding process: {exc}") from exc
        finally:
            os.close(write_end)
        self._proc, self._out, self._answered = proc, read_end, False
        return proc

    def _failed(self) -> None:
        self._failures += 1
        delay = min(BACKOFF_MAX, BACKOFF_MIN * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay

    def _read(self, fd: int, n: int, deadline: float) -> bytes:
        """Exactly ``n`` bytes from the child, by ``deadline``; EOFError when it closed,
        TimeoutError when it took too long or the encoder is closing."""
        out = bytearray()
        while len(out) < n:
            if self.closed:
                raise TimeoutError("the encoder is closing")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the vector encoding process did not answer in time")
            ready, _, _ = select.select([fd], [], [], min(_POLL, left))
            if ready:
                chunk = os.read(fd, n - len(out))
                if not chunk:
                    raise EOFError("the vector encoding process closed its output")
                out += chunk
        return bytes(out)

    def _one(self, text: str) -> bytes:
        proc = self._child()
        assert proc.stdin is not None
        data = text.encode("utf-8", "surrogatepass")
        deadline = time.monotonic() + (TEXT_SECONDS if self._answered else FIRST_TEXT_SECONDS)
        fd = self._out
        try:
            proc.stdin.write(_frame(data))
            (size,) = _LEN.unpack(self._read(fd, _LEN.size, deadline))
            if size == _FAILED:
                (n,) = _LEN.unpack(self._read(fd, _LEN.size, deadline))
                if n > _MAX_WHY:
                    raise ValueError(f"an error text of {n} bytes")
                why = self._read(fd, n, deadline).decode("utf-8", "replace")
                self._answered = True
                raise EncoderWorkerError(f"the vector encoding process failed: {why}")
            if size != 4 * _dim():
                raise ValueError(f"a vector of {size} bytes")
            raw = self._read(fd, size, deadline)
        except EncoderWorkerError:
            raise
        except (OSError, EOFError, ValueError, TimeoutError) as exc:
            self._stop(proc)
            self._failed()
            raise EncoderWorkerError(f"the vector encoding process is gone: {exc}") from exc
        except BaseException:
            self._stop(proc)  # out of step with the pipe: the next text needs a new child
            raise
        self._answered, self._failures = True, 0
        return raw

    def encode(self, texts: Sequence[str], between: Callable[[], None] | None = None) -> Matrix:
        """One unit vector per text, as :meth:`.embed.Encoder.encode` gives it; ``between`` is
        called after each text (what it raises ends the encoding)."""
        import numpy as np

        out = np.zeros((len(texts), _dim()), dtype=np.float32)
        for row, text in enumerate(texts):
            with self._lock:
                raw = self._one(text)
            out[row] = np.frombuffer(raw, dtype="<f4")
            if between is not None:
                between()
        return out

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if self._proc is proc:
            self._proc = None
            if self._out >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._out)
                self._out = -1

    def close(self) -> None:
        """Stop the child; a text being encoded in another thread fails at once (the
        filing fails open: its record stays pending)."""
        self.closed = True
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()  # (without the lock: a thread may be waiting for the child)
            with self._lock:
                self._stop(proc)


def _dim() -> int:
    from .embed import DIM

    return DIM


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError("the other side closed the pipe")
    return data


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The child's loop: a framed text in, its vector (float32, little-endian) out."""
    from .embed import encoder

    enc = encoder()
    while True:
        head = stdin.read(_LEN.size)
        if not head or len(head) != _LEN.size:
            return 0
        (size,) = _LEN.unpack(head)
        data = _read_exact(stdin, size)
        try:
            text = data.decode("utf-8", "surrogatepass")
            if enc is None:
                raise RuntimeError("the semantic extra is not installed")
            vec = enc.encode([text])[0]
            stdout.write(_frame(vec.astype("<f4").tobytes()))
        except Exception as exc:  # reported to the parent, which fails open
            why = repr(exc).encode("utf-8", "replace")[:_MAX_WHY]
            stdout.write(_LEN.pack(_FAILED) + _frame(why))
        stdout.flush()


def lowest_priority() -> None:
    """Run only on what the other processes leave of the cores: nice 19, the idle
    scheduling class where the system has it, and, where the kernel groups the processes of
    a session for scheduling (autogroup, the default of most Linux desktops and servers),
    this process's own group at nice 19 too (the child has a session of its own: without
    that, its group would get as much of the cores as the gateway's)."""
    with contextlib.suppress(OSError):
        os.nice(19)
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is not None:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, idle, os.sched_param(0))
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")


def main(argv: Sequence[str] | None = None) -> int:
    """``--out-fd N``: the pipe the vectors go to (the parent's); standard input the texts."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--out-fd" or not args[1].isdigit():
        print("usage: python -m contextfold.evidence.embed_worker --out-fd N", file=sys.stderr)
        return 2
    lowest_priority()
    try:
        with os.fdopen(int(args[1]), "wb") as out:
            return serve(sys.stdin.buffer, out)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
