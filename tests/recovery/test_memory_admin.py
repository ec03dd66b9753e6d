"""Memory by hand: extract, flush, add / edit / delete, with compaction off; the agent's
memory_* tools do the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.core.config import ContextConfig
from contextfold.errors import ContextFoldError

OFF = ContextConfig(preset="custom", tiers=None, ingest_offload_chars=0, recovery=None)
CHAT = [
    {"role": "user", "content": "The service must listen on port 5433."},
    {"role": "assistant", "content": "Decision: we keep SQLite for the test suite."},
]


def manager(tmp_path: Path, name: str = "m") -> ContextManager:
    return ContextManager(workspace=tmp_path, session_id=name, context_window=8_000, config=OFF)


def test_extract_facts_from_given_messages_with_compaction_off(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    facts = cm.extract_facts(CHAT, store=False)
    assert {f.kind for f in facts} == {"configuration", "conclusion"}
    assert cm.facts() == []
    cm.extract_facts(CHAT)
    assert sorted(f.text for f in cm.facts()) == sorted(f.text for f in facts)


def test_flush_memory_stores_the_sessions_facts_now_once(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    cm.add_many(CHAT)
    cm.prepare()  # nothing compacts: no fact is stored on the way
    assert cm.facts() == []
    assert cm.flush_memory() == 2
    assert cm.flush_memory() == 0
    cm.add({"role": "user", "content": "Requirement: logs go to /var/log/app."})
    assert cm.flush_memory() == 1
    again = manager(tmp_path)  # stored: another manager reads it
    assert any("5433" in f.text for f in again.facts())
    assert "5433" in again.recovery.memory.get()


def test_add_edit_delete_a_fact(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    fid = cm.add_fact("Deploys happen on Fridays.", kind="constraint")
    (fact,) = cm.facts()
    assert fact.id == fid and fact.kind == "constraint"
    new = cm.edit_fact(fid, "Deploys happen on Tuesdays.")
    assert new != fid
    assert [f.text for f in cm.facts()] == ["Deploys happen on Tuesdays."]
    assert [h.id for h in cm.recovery.memory.search("Tuesdays")] == [new]
    assert cm.recovery.memory.search("Fridays") == []
    same = cm.edit_fact(new, "Deploys happen on Tuesdays.", kind="requirement")
    assert same == new and cm.facts()[0].kind == "requirement"
    cm.delete_fact(new)
    assert cm.facts() == []
    assert cm.recovery.memory.search("Tuesdays") == []
    assert "no facts stored yet" in manager(tmp_path).recovery.memory.get()
    with pytest.raises(ContextFoldError, match="no fact"):
        cm.delete_fact(new)
    with pytest.raises(ContextFoldError, match="kind"):
        cm.add_fact("Something true.", kind="gossip")


def test_the_agents_memory_tools_do_the_same(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    box = cm.toolbox
    cm.add_many(CHAT)
    text, err = box.run("memory_flush", {})
    assert not err and text.startswith("2 new fact")
    text, err = box.run(
        "memory_add", {"text": "The API key lives in vault.", "kind": "configuration"}
    )
    assert not err
    fid = text.split()[-1].rstrip(".")
    found, _ = box.run("memory_search", {"query": "vault"})
    assert f"(id {fid})" in found
    text, err = box.run("memory_edit", {"id": fid, "text": "The API key lives in the vault."})
    assert not err
    new = text.rsplit("id ", 1)[1].rstrip(").")
    text, err = box.run("memory_delete", {"id": new})
    assert not err
    found, _ = box.run("memory_search", {"query": "vault"})
    assert "No memory matches" in found
    text, err = box.run("memory_delete", {"id": "nothex"})
    assert err and "16 hex" in text
    names = {t["function"]["name"] for t in cm.tool_schemas()}
    assert {"memory_add", "memory_edit", "memory_delete", "memory_flush"} <= names
