"""Sentence vectors computed in a child process at the lowest CPU priority.

The gateway files the vectors of what its compactions removed after each answer
(:mod:`.store_vectors`). Encoding is the costliest work a gateway process does (about 25 ms of
CPU per output), and in a thread of the serving process it competes with the requests twice:
for the cores, and for the interpreter lock, which a thread of low priority holds while the
scheduler keeps it waiting (the requests then wait for it). A child process at the lowest
priority never holds their lock, and the scheduler gives the requests the cores first (on
busy cores the encoding still slows them somewhat: docs/performance.md has the figures).

The child runs the same :class:`.embed.Encoder` on the same numpy with one BLAS thread, so a
text gives the same vector bit for bit as in the serving process. It reads texts from its
standard input and writes vectors to a pipe of its own, framed by length; it exits when its
input closes (the gateway stopped, or died), and runs in its own session (a Ctrl-C in the
gateway's terminal does not reach it) from the package's folder (nothing in the gateway's
working directory is imported). A child that fails, cannot start, or takes too long is
reported as an error by :meth:`WorkerEncoder.encode` and killed; the filing fails open (the
vectors stay pending, and a search files them itself), and no new child is started for a
back-off that doubles with each failure in a row.

Each serving process has its own child (about 180 MB with the model). The children of one user
on a machine take turns computing (a lock file, :func:`lock_path`): at most one vector at a
time, so they take at most one core whatever the number of serving processes. A child waits
at most :data:`TURN_WAIT_SECONDS` for its turn (well within its deadline), then computes anyway.

Run as ``python -m contextfold.evidence.embed_worker --out-fd N`` (the gateway starts it).
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import struct
import subprocess
import sys
import tempfile
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

_LEN = struct.Struct("<I")
#: the length a failed encoding is answered with (followed by the error's text)
_FAILED = 0xFFFFFFFF
#: the most bytes of an error's text the parent reads
_MAX_WHY = 1 << 16
#: seconds the child may take for one text: its first includes starting and loading the
#: model (a few seconds on a busy machine); a child that takes longer is killed
FIRST_TEXT_SECONDS = 120.0
TEXT_SECONDS = 30.0
#: the longest a child waits for its turn before computing anyway (a child holding the turn
#: may be starved at the lowest priority, hung or stopped; waiting uses no CPU, which does not
#: renew the deadline)
TURN_WAIT_SECONDS = 5.0
#: after a failure no child is started for this long (doubling up to BACKOFF_MAX): a child
#: that dies at start costs a model load each time
BACKOFF_MIN = 1.0
BACKOFF_MAX = 300.0
#: the parent checks whether it is closing this often while it waits for an answer
_POLL = 0.25
#: a child that keeps using CPU past its deadline (it runs at the lowest priority: on busy
#: cores it may get little of them) is given more time, up to this many times the deadline
HARD_FACTOR = 10


class EncoderWorkerError(ContextFoldError):
    """The vector encoding child process failed or is gone."""


def _frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


#: variables the child does not get: it encodes texts and needs no credential or store address
_PRIVATE = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|_URL$|_DSN$|^CONTEXTFOLD_", re.I)


def _child_env() -> dict[str, str]:
    """The child's environment: the parent's without anything that may hold a secret (keys,
    tokens, store URLs, the gateway's own settings), BLAS on one thread (as
    :class:`.embed.Encoder` runs it), and the import path as the parent resolved it (the child
    runs in another folder)."""
    env = {k: v for k, v in os.environ.items() if not _PRIVATE.search(k)}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
    return env


def _package_root() -> str:
    """The folder holding this package: the child runs there, so ``python -m`` puts no
    folder of the gateway's own working directory (an agent's workspace) on its path."""
    return str(Path(__file__).resolve().parents[2])


def _cpu_ticks(pid: int) -> int:
    """The CPU time a process has used, in clock ticks (-1: unknown, not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return -1


class _Deadline:
    """How long the parent waits for one text: ``seconds``, renewed as long as the child used
    CPU in the time that passed (it is working, slowly), at most ``HARD_FACTOR`` times."""

    def __init__(self, pid: int, seconds: float) -> None:
        now = time.monotonic()
        self.pid, self.seconds = pid, seconds
        self.soft, self.hard = now + seconds, now + seconds * HARD_FACTOR
        self.ticks = _cpu_ticks(pid)

    def left(self) -> float:
        now = time.monotonic()
        if now >= self.soft:
            ticks = _cpu_ticks(self.pid)
            if ticks > self.ticks >= 0:
                self.ticks, self.soft = ticks, now + self.seconds
        return min(self.soft, self.hard) - now


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
        if proc is not None:  # died between two texts (each failure within one is counted)
            self._stop(proc)
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
        except BaseException as exc:
            os.close(read_end)
            if not isinstance(exc, OSError):
                raise
            self._failed()
            raise EncoderWorkerError(f"could not start the vector encoding process: {exc}") from exc
        finally:
            os.close(write_end)
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)  # writes wait with a deadline too
        self._proc, self._out, self._answered = proc, read_end, False
        return proc

    def _failed(self) -> None:
        self._failures += 1
        delay = min(BACKOFF_MAX, BACKOFF_MIN * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay

    def _wait(self, fd: int, event: int, deadline: _Deadline) -> None:
        """Until ``fd`` is ready for ``event``; TimeoutError when the child took too long or
        the encoder is closing."""
        with selectors.DefaultSelector() as sel:  # (any fd number, unlike select())
            sel.register(fd, event)
            while True:
                if self.closed:
                    raise TimeoutError("the encoder is closing")
                left = deadline.left()
                if left <= 0:
                    raise TimeoutError("the vector encoding process did not answer in time")
                if sel.select(min(_POLL, left)):
                    return

    def _write(self, fd: int, data: bytes, deadline: _Deadline) -> None:
        view = memoryview(data)
        while view:
            self._wait(fd, selectors.EVENT_WRITE, deadline)
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue

    def _read(self, fd: int, n: int, deadline: _Deadline) -> bytes:
        """Exactly ``n`` bytes from the child; EOFError when it closed."""
        out = bytearray()
        while len(out) < n:
            self._wait(fd, selectors.EVENT_READ, deadline)
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise EOFError("the vector encoding process closed its output")
            out += chunk
        return bytes(out)

    def _one(self, text: str) -> bytes:
        proc = self._child()
        assert proc.stdin is not None
        data = text.encode("utf-8", "surrogatepass")
        deadline = _Deadline(proc.pid, TEXT_SECONDS if self._answered else FIRST_TEXT_SECONDS)
        fd = self._out
        try:
            self._write(proc.stdin.fileno(), _frame(data), deadline)
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

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

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
    turn = _one_at_a_time()
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
            with turn:
                vec = enc.encode([text])[0]
            stdout.write(_frame(vec.astype("<f4").tobytes()))
        except Exception as exc:  # reported to the parent, which fails open
            why = repr(exc).encode("utf-8", "replace")[:_MAX_WHY]
            stdout.write(_LEN.pack(_FAILED) + _frame(why))
        stdout.flush()


def lock_path() -> Path:
    """The file the encoding processes of one user on this machine take turns by: at most one
    of them computes a vector at a time, whatever the number of serving processes, so the
    vectors never take more than one core from the requests."""
    folder = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(folder) / f"contextfold-vectors-{uid}.lock"


class _Turn:
    """The machine-wide turn of :func:`lock_path` (an exclusive ``flock``), held while one
    vector is computed; without ``fcntl`` or a lock file of this user's alone, or after
    :data:`TURN_WAIT_SECONDS` of waiting, the vector is computed without it."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self.held = False

    def __enter__(self) -> None:
        """Take the turn, waiting at most :data:`TURN_WAIT_SECONDS` (then go on without it)."""
        if self.fd is None:
            return
        import fcntl

        end = time.monotonic() + TURN_WAIT_SECONDS
        pause = 0.001
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
                return
            except BlockingIOError:
                left = end - time.monotonic()
                if left <= 0:
                    return
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.02)
            except OSError:
                return

    def __exit__(self, *exc: object) -> None:
        if self.held and self.fd is not None:
            import fcntl

            self.held = False
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)


def _one_at_a_time() -> _Turn:
    try:
        import fcntl  # noqa: F401  (POSIX only)

        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(lock_path(), flags, 0o600)
    except (ImportError, OSError):  # no turns: each process computes on its own
        return _Turn(None)
    info = os.fstat(fd)
    # another user's file (a shared temp folder), or one others may open (and hold the turn)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        os.close(fd)
        return _Turn(None)
    return _Turn(fd)


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
    group = Path("/proc/self/autogroup")
    for _ in range(20):  # the kernel takes one such change per 100 ms on the whole machine
        try:
            group.write_text("19")
            return
        except BlockingIOError:
            time.sleep(0.15)
        except OSError:
            return


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
