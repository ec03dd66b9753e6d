"""The view at call N is the one recorded when it was sent: after each compaction the manager
records the view's layout (which history messages it sent as they are, which in another form,
where the summary stood), and the inspector shows, for every call, exactly the history
messages the manager's view held at that call. A store without those records (written before
they were kept) still gets the reconstructed view, marked as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.inspector import view_at as view_at_module
from contextfold.inspector.view_at import view_at
from contextfold.storage import open_store
from tests.conftest import TRACES_DIR, load_trace
from tests.inspector.inspector_support import TRACE, WINDOW

SID = "recorded"


def _replay(folder: Path) -> list[set[int]]:
    """Replay the bundled trace; per model call, the history positions its view held."""
    sent: list[set[int]] = []
    with ContextManager(store=str(folder), session_id=SID, context_window=WINDOW) as cm:
        for i, msg in enumerate(load_trace(TRACES_DIR / TRACE)):
            if msg.get("role") == "assistant" and i > 0:
                cm.prepare()
                uuids = cm.view.uuids
                sent.append({uuids[m.uuid] for m in cm.view_messages if m.uuid in uuids})
            cm.add(msg)
    return sent


def _in_view(rows: list[dict[str, object]]) -> set[int]:
    return {int(str(r["position"])) for r in rows if r["status"] != "summarized"}


def test_every_calls_view_is_the_recorded_one(tmp_path: Path) -> None:
    sent = _replay(tmp_path / "ws")
    store = open_store(str(tmp_path / "ws"))
    try:
        shown = [view_at(store, SID, n + 1) for n in range(len(sent))]
    finally:
        store.close()
    compacted = [v for v in shown if v["compaction"] is not None]
    assert compacted, "the trace compacts at this window"
    assert all(v["recorded"] for v in compacted)
    for n, (view, held) in enumerate(zip(shown, sent, strict=True), 1):
        assert _in_view(view["messages"]) == held, f"call {n}"


def test_a_store_without_recorded_views_is_reconstructed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _replay(tmp_path / "ws")
    monkeypatch.setattr(view_at_module, "VIEW_EVENT", "no-such-event")  # an older store
    store = open_store(str(tmp_path / "ws"))
    try:
        last = view_at(store, SID, len(sent))
    finally:
        store.close()
    assert last["compaction"] is not None and last["recorded"] is False
    assert any(r["status"] == "summarized" for r in last["messages"])
