"""A caller's own rewrite of its conversation (``ContextManager.rewrite``): retracted messages
leave the view for good, stay in the history, and reopening (lazily or reading everything, on
every store) gives the same view."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextfold import ContextManager
from contextfold.errors import ContextFoldError, InvalidMessageError
from contextfold.storage import MemoryStore, SQLiteStore, Store
from tests.support import pg_support


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "sqlite":
        s = SQLiteStore(tmp_path / "ws")
        try:
            yield s
        finally:
            s.close()
        return
    factory = pg_support.SchemaFactory(pg_support.require_postgres())
    try:
        yield factory.open()
    finally:
        factory.cleanup()


def _open(store: Store, window: int = 100_000) -> ContextManager:
    return ContextManager(store=store, session_id="s", context_window=window)


def _open_full(store: Store, monkeypatch: pytest.MonkeyPatch) -> ContextManager:
    with monkeypatch.context() as m:
        m.setattr("contextfold.engine.reopen.load_lazily", lambda cm: None)
        return _open(store)


def _texts(cm: ContextManager) -> list[tuple[str, Any]]:
    return [(m.role, m.content) for m in cm.view_messages]


FILES_1 = {
    "role": "user",
    "content": "I have *added these files to the chat*\napp.py\n```\nv1\n```",
}
FILES_2 = {
    "role": "user",
    "content": "I have *added these files to the chat*\napp.py\n```\nv2\n```",
}
FILES_OK = {"role": "assistant", "content": "Ok, any changes I propose will be to those files."}


def test_rewrite_moves_a_files_block_and_reopens_the_same(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm = _open(store)
    cm.add_many(
        [
            {"role": "system", "content": "You are aider."},
            FILES_1,
            FILES_OK,
            {"role": "user", "content": "make it v2"},
            {"role": "assistant", "content": "done: v2"},
        ]
    )
    # the client's next request: the files block moved after the conversation, refreshed
    added = cm.rewrite(
        [1, 2],
        [FILES_2, FILES_OK, {"role": "user", "content": "now run it"}],
        note={"why": "moved"},
    )
    assert added[0].content == FILES_2["content"]
    want = [
        ("system", "You are aider."),
        ("user", "make it v2"),
        ("assistant", "done: v2"),
        ("user", FILES_2["content"]),
        ("assistant", FILES_OK["content"]),
        ("user", "now run it"),
    ]
    assert _texts(cm) == want
    assert len(cm.history) == 8  # nothing deleted: the old files block is still there
    assert cm.history[1].content == FILES_1["content"]
    assert cm.view.newest_user == 7 and cm.view.first_user == 3
    tokens = cm.view_tokens
    cm.prepare()
    cm.close()
    for reopened in (_open(store), _open_full(store, monkeypatch)):
        assert _texts(reopened) == want
        assert reopened.view.retracted == {1, 2}
        assert reopened.view_tokens == tokens
        assert reopened.history[1].content == FILES_1["content"]
        reopened.close()


def test_retracted_tool_calls_free_their_ids(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    cm = _open(store)
    cm.add_many(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task <system-reminder>a</system-reminder>"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
        ]
    )
    # the client changed the reminder of an old message: it and what follows are resent
    cm.rewrite(
        [1, 2, 3],
        [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
            {"role": "user", "content": "next"},
        ],
    )
    assert [m.role for m in cm.view_messages] == ["system", "user", "assistant", "tool", "user"]
    assert cm.view.result_index("c1") == 6
    cm.close()
    full = _open_full(store, monkeypatch)
    assert [m.content for m in full.view_messages][1] == "task"
    full.close()
    reopened = _open(store)
    assert [m.content for m in reopened.view_messages][1] == "task"
    assert reopened.view.result_index("c1") == 6
    reopened.add({"role": "assistant", "content": "fine"})
    reopened.close()


def test_an_output_offloaded_before_a_rewrite_stays_with_its_message(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output offloaded on arrival, then retracted by a rewrite that sends another output
    under the same call id: the view shows the new output, before and after reopening (the
    stored offload belongs to the retracted message, not to the call id's new result)."""
    call = {"id": "c0", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    big = "\n".join(f"A{j} " + "a" * 90 for j in range(200))  # offloaded when it arrives
    cm = _open(store, 40_000)
    cm.add({"role": "user", "content": "task"})
    cm.add_many([{"role": "assistant", "content": None, "tool_calls": [call]}])
    cm.add({"role": "tool", "tool_call_id": "c0", "content": big})
    cm.add({"role": "user", "content": "go on"})
    cm.rewrite(
        [1, 2],
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c0", "content": "B small output"},
        ],
    )
    shown = [m.text for m in cm.view_messages if m.role == "tool"]
    assert shown == ["B small output"]
    cm.prepare()
    cm.close()
    for again in (_open(store, 40_000), _open_full(store, monkeypatch)):
        assert [m.text for m in again.view_messages if m.role == "tool"] == shown
        again.close()


def test_a_bad_rewrite_changes_nothing(store: Store) -> None:
    cm = _open(store)
    cm.add_many([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    before = _texts(cm)
    with pytest.raises(InvalidMessageError):
        cm.rewrite([7], [{"role": "user", "content": "x"}])
    with pytest.raises(ContextFoldError):  # a result for a call that never appeared
        cm.rewrite([1], [{"role": "tool", "tool_call_id": "nope", "content": "x"}])
    assert _texts(cm) == before and not cm.view.retracted
    cm.close()
    again = _open(store)
    assert _texts(again) == before and len(again.history) == 2
    again.close()


def test_compaction_after_rewrites_never_shows_retracted_messages(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm = _open(store, window=2_500)
    cm.add({"role": "system", "content": "You are aider."})
    files = FILES_1
    for turn in range(30):
        n = len(cm.history)
        new = [
            {"role": "user", "content": f"request {turn}: " + "word " * 40},
            {"role": "assistant", "content": f"answer {turn}: " + "text " * 40},
        ]
        if turn == 0:
            cm.add_many([files, FILES_OK, *new])
            continue
        # the files block sits after the conversation: the previous one is retracted
        prev_files = [i for i in range(n) if cm.history[i].content == files["content"]][-1]
        files = {"role": "user", "content": FILES_1["content"] + f"\n# turn {turn}"}
        cm.rewrite([prev_files, prev_files + 1], [files, FILES_OK, *new])
        view = cm.prepare()
        contents = [d.get("content") for d in view]
        assert sum(1 for c in contents if str(c).startswith("I have *added")) <= 1
        assert cm.view_tokens <= 2_500
    assert cm.records()  # it did compact
    live = _texts(cm)
    cm.close()
    lazy = _open(store, window=2_500)
    assert not lazy.view.complete  # the history before the boundary is not read
    assert _texts(lazy) == live
    assert lazy.view.retracted and all(
        not lazy.view.is_loaded(i) for i in lazy.view.retracted if i < lazy.view.boundary
    )
    lazy.close()
    full = _open_full(store, monkeypatch)
    assert _texts(full) == live
    full.close()


def test_export_writes_the_rewrites(tmp_path: Path) -> None:
    from contextfold.engine.export import export_session

    store = SQLiteStore(tmp_path / "ws")
    cm = _open(store)
    cm.add_many([{"role": "system", "content": "s"}, FILES_1, FILES_OK])
    cm.rewrite([1, 2], [FILES_2, FILES_OK], note={"why": "refreshed"})
    counts = export_session(store, "s", tmp_path / "out")
    assert counts["messages"] == 5 and counts["rewrites"] == 1
    (line,) = (tmp_path / "out" / "rewrites.jsonl").read_text().splitlines()
    assert json.loads(line) == {"at": 3, "retract": [1, 2], "note": {"why": "refreshed"}}
    cm.close()
    store.close()
