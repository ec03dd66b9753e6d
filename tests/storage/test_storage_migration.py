"""Workspaces written by the release before the storage layer open unchanged (migrated on first
open, or with ``contextfold migrate``), and ``contextfold export`` writes the human-readable
files back from any backend."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.cli import main
from contextfold.core.wire import to_openai
from contextfold.engine.export import export_session
from contextfold.engine.migrate import _migrate_session, legacy_sessions, migrate_workspace
from contextfold.storage import MemoryStore, SQLiteStore

DATA = Path(__file__).parents[1] / "data"
LEGACY = DATA / "legacy_workspace"
#: What the previous release showed for that workspace (view, counts), computed with it.
EXPECTED = json.loads((DATA / "legacy_workspace.expected.json").read_text(encoding="utf-8"))


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(LEGACY, ws)
    return ws


def _open(ws: Path, agent: str = "alice") -> ContextManager:
    return ContextManager(
        workspace=ws, session_id="legacy-a", context_window=16_000, preset="harness", agent_id=agent
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_old_workspace_opens_unchanged(legacy: Path) -> None:
    before = _files(legacy)
    cm = _open(legacy)
    assert [to_openai(m) for m in cm.view_messages] == EXPECTED["view"]
    assert len(cm.history) == EXPECTED["history"] == 60
    assert len(cm.records()) == EXPECTED["records"]
    assert sorted(cm.offloaded()) == EXPECTED["offloaded"]
    assert [t.content for t in cm.state.todos] == EXPECTED["todos"]
    assert cm.calibration.scale == pytest.approx(EXPECTED["scale"])
    # offloaded outputs, evidence and session search work from the migrated store
    call_id = EXPECTED["offloaded"][0]
    original = next(m.text for m in cm.history if m.tool_call_id == call_id)
    assert cm.recover_tool_result(call_id) == original
    page = cm.handle_tool_call(
        {
            "id": "r",
            "function": {"name": "read_offloaded", "arguments": json.dumps({"id": call_id})},
        }
    )
    assert not page["content"].startswith("Error")
    hits = cm.restore("reproduce_issue.py", k=3)
    assert hits and all(h.sha256_ok for h in hits)
    found = cm.handle_tool_call(
        {"id": "s", "function": {"name": "session_search", "arguments": '{"query": "lookup"}'}}
    )
    assert "legacy-a" in found["content"]
    # isolation survives: bob's session stays bob's; alice's memory is alice's
    secret = cm.handle_tool_call(
        {
            "id": "h",
            "function": {"name": "session_history", "arguments": '{"sessionId": "legacy-b"}'},
        }
    )
    assert secret["content"].startswith("Error") and "friday" not in secret["content"]
    assert cm.recovery.memory.search("database port staging") == [] or all(
        "5433" not in h.text for h in _open(legacy, "mallory").recovery.memory.search("port")
    )
    assert cm.recovery.memory.search("unregister lookup cache")
    # the old files are left exactly as they were
    after = _files(legacy)
    assert {k: v for k, v in after.items() if k in before} == before
    cm.add({"role": "user", "content": "continue after the upgrade"})
    assert len(_open(legacy).history) == 61


def test_migration_is_idempotent_and_resumes_when_interrupted(legacy: Path) -> None:
    store = SQLiteStore(legacy)
    owners: dict[str, str] = {}
    # interrupted after the first session: the second open finishes the job, once
    assert _migrate_session(store, legacy_sessions(legacy)[0], owners)
    counts = migrate_workspace(store)
    assert counts == {"sessions": 1, "seen": 2, "facts": counts["facts"]} and counts["facts"] > 5
    again = migrate_workspace(store)
    assert again["sessions"] == 0
    assert store.session("legacy-a").messages == 60  # type: ignore[union-attr]
    assert store.session("legacy-b").agent_id == "bob"  # type: ignore[union-attr]
    assert len(store.search("session", "friday", limit=50)) == 1  # not indexed twice
    store.close()
    cm = _open(legacy)
    assert len(cm.history) == 60 and len(cm.records()) == EXPECTED["records"]


def test_session_without_meta_is_nobodys(legacy: Path) -> None:
    (legacy / "sessions/legacy-b/meta.json").unlink()
    cm = _open(legacy, "default")
    text = cm.handle_tool_call(
        {
            "id": "h",
            "function": {"name": "session_history", "arguments": '{"sessionId": "legacy-b"}'},
        }
    )["content"]
    assert text.startswith("Error") and "friday" not in text
    assert cm.store.session("legacy-b").agent_id == "unknown-owner"  # type: ignore[union-attr]


def test_migrate_command(legacy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(legacy)]) == 0
    assert "2 of 2 old session folder(s) moved" in capsys.readouterr().out
    assert main(["migrate", str(legacy)]) == 0
    assert "0 of 2" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
def test_export_writes_the_readable_files(legacy: Path, tmp_path: Path, backend: str) -> None:
    cm = _open(legacy)
    if backend == "memory":  # replay into another backend, then export from it
        mem = MemoryStore()
        other = ContextManager(
            store=mem,
            session_id="legacy-a",
            context_window=16_000,
            preset="harness",
            agent_id="alice",
        )
        for m in cm.history:
            other.add(m)
            other.prepare()
        store, expected = mem, other
    else:
        store, expected = cm.store, cm
    out = tmp_path / f"out-{backend}"
    counts = export_session(store, "legacy-a", out)
    log = [json.loads(x) for x in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["uuid"] for e in log] == [m.uuid for m in expected.history]
    assert [e["message"] for e in log] == [to_openai(m) for m in expected.history]
    records = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(records) == len(expected.records()) == counts["records"]
    blocks = (out / "compact-blocks.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(blocks) == counts["blocks"] > 0
    for entry in expected.offloaded().values():
        data = (out / "tool_results" / Path(entry.path).name).read_bytes()
        assert data.decode() == expected.recover_tool_result(entry.tool_call_id)
    for line in blocks:
        for p in json.loads(line)["evidence"]:
            assert (out / "evidence" / p["sha256"][:2] / f"{p['sha256']}.txt").is_file()
    if backend == "sqlite":
        memory = (out / "memory" / "MEMORY.md").read_text(encoding="utf-8")
        assert memory.startswith("# Memory") and "unregister" in memory.lower()
    assert (
        main(["export", "legacy-a", "--workspace", str(legacy), "-o", str(tmp_path / "cli")]) == 0
    )
    assert (tmp_path / "cli" / "log.jsonl").is_file()
