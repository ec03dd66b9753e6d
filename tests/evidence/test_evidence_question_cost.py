"""What one recall question costs: the text of a hit is restored for the hits returned only,
the whole pointers are read as far as the hits are found, a second BM25 query is asked only
when it can change the order, and the bound under which a BM25 hit's metadata is not read
holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold.core.messages import Message
from contextfold.evidence import lookups, question
from contextfold.evidence.qdocs import Doc, preference
from contextfold.evidence.search import EvidenceSearch
from contextfold.evidence.store import EvidenceStore
from tests.evidence.test_evidence_search import compact, pairs
from tests.support.store_helpers import session_store

OK = "<returncode>0</returncode>\n<output>\n{}</output>"


def _messages() -> list[Message]:
    items = [(f"python run_{i}.py", OK.format(f"widget {i} ready\n")) for i in range(12)]
    items.append(("pip install -e .", OK.format("Successfully installed mypkg-0.1\n")))
    return pairs(items)


def _search(tmp_path: Path, visible: list[str] | None = None) -> EvidenceSearch:
    store = EvidenceStore(session_store(tmp_path))
    msgs = _messages()
    compact(store, msgs)
    shown = [m.uuid for m in msgs if m.tool_call_id in (visible or [])]
    return EvidenceSearch(store, visible=(lambda: shown) if shown else None)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    got = {"restore": 0, "full": 0, "bm25": 0}
    restore, full, bm25 = EvidenceStore.restore, lookups.StoreKeys.full, EvidenceSearch.bm25_all

    def counted_restore(self: EvidenceStore, *a: object, **kw: object) -> object:
        got["restore"] += 1
        return restore(self, *a, **kw)  # type: ignore[arg-type]

    def counted_full(self: lookups.StoreKeys, metas: object) -> object:
        got["full"] += len(metas)  # type: ignore[arg-type]
        return full(self, metas)  # type: ignore[arg-type]

    def counted_bm25(self: EvidenceSearch, *a: object, **kw: object) -> object:
        got["bm25"] += 1
        return bm25(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(EvidenceStore, "restore", counted_restore)
    monkeypatch.setattr(lookups.StoreKeys, "full", counted_full)
    monkeypatch.setattr(EvidenceSearch, "bm25_all", counted_bm25)
    yield got


def test_text_restored_for_the_hits_returned_only(tmp_path: Path, counts: dict[str, int]) -> None:
    # every output but the two newest runs still in view: the hits are read in order only
    # until two that left the view are found, and only those two are restored
    shown = [f"c{i}" for i in range(10)]
    search = _search(tmp_path, visible=shown)
    hits = search.search("widget ready", k=2)
    assert [h.pointer.tool_use_id for h in hits] == ["c11", "c10"]
    assert all("widget" in h.text_preview for h in hits)
    assert counts["restore"] == 2
    assert counts["full"] == 2


def test_every_hit_in_view_gives_the_best_ones(tmp_path: Path, counts: dict[str, int]) -> None:
    search = _search(tmp_path, visible=[f"c{i}" for i in range(13)])
    hits = search.search("widget ready", k=2)
    assert [h.pointer.tool_use_id for h in hits] == ["c11", "c10"]  # the newest first
    assert counts["restore"] == 2
    assert search.search("widget ready", k=2, removed_only=True) == []


def test_no_second_bm25_query_when_no_named_output_has_its_words(
    tmp_path: Path, counts: dict[str, int]
) -> None:
    # the install is found by its program; no output of it has a word of the question, so
    # the words that would tell its runs apart cannot: one BM25 query only
    search = _search(tmp_path)
    hits = search.search("How did fetching the packages go, the one with widget?", k=1)
    assert hits and hits[0].pointer.tool_use_id == "c12"
    assert counts["bm25"] == 1


def test_preference_and_recency_weigh_at_most_weight_max() -> None:
    most = Doc(
        0,
        rank={"sourceScope": "sub_agent", "role": "tool", "errorish": True, "createdAt": 9},
        failed=True,
    )
    assert preference(most, False) * 1.1 == pytest.approx(question.WEIGHT_MAX)
