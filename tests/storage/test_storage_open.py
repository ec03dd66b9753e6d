"""open_store(): folder, URLs, the CONTEXTFOLD_STORE default, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.errors import ConfigError, StorageError
from contextfold.storage import MemoryStore, SQLiteStore, open_store


def test_targets(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    folder = open_store(tmp_path / "a")
    assert isinstance(folder, SQLiteStore) and (tmp_path / "a" / "store.sqlite").is_file()
    assert folder.url == f"sqlite:///{tmp_path / 'a' / 'store.sqlite'}"
    again = open_store(folder.url)
    assert isinstance(again, SQLiteStore) and again.root == tmp_path / "a"
    assert isinstance(open_store(str(tmp_path / "b")), SQLiteStore)
    for bad in ("ftp://x", "", "   "):
        with pytest.raises(ConfigError):
            open_store(bad)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StorageError, match="cannot create the store"):
        open_store(tmp_path / "file")


def test_environment_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTFOLD_STORE", str(tmp_path / "from-env"))
    with ContextManager(session_id="s") as cm:
        cm.add({"role": "user", "content": "hello"})
    assert (tmp_path / "from-env" / "store.sqlite").is_file()
    monkeypatch.setenv("CONTEXTFOLD_STORE", "memory://")
    with ContextManager(session_id="s") as cm:
        assert isinstance(cm.store, MemoryStore) and cm.history == []
    monkeypatch.delenv("CONTEXTFOLD_STORE")
    with pytest.raises(ConfigError):
        open_store(None)
    with pytest.raises(ConfigError, match="either workspace"):
        ContextManager(workspace=tmp_path, store="memory://")


def test_a_shared_store_serves_many_managers() -> None:
    store = MemoryStore()
    a = ContextManager(store=store, session_id="a", agent_id="alice")
    b = ContextManager(store=store, session_id="b", agent_id="bob")
    a.add({"role": "user", "content": "alpha secret"})
    b.add({"role": "user", "content": "beta"})
    assert [s.session_id for s in store.sessions(["alice"])] == ["a"]
    text = b.handle_tool_call(
        {"id": "h", "function": {"name": "session_history", "arguments": '{"sessionId": "a"}'}}
    )["content"]
    assert text.startswith("Error") and "alpha" not in text
    a.close()
    b.close()
    assert store.head("a") == 1  # not closed by the managers: it was passed in
