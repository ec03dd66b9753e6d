"""Long-term memory: extraction, flush without duplicates, search/get and the memory tools."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contextfold.core.messages import Message, ToolCall, assistant, tool, user
from contextfold.core.tools import ToolBox
from contextfold.core.wire import messages_from_openai
from contextfold.errors import UnsafeIdError
from contextfold.recovery.memory import (
    ExtractiveFactExtractor,
    Fact,
    FactExtractor,
    LLMFactExtractor,
    MemoryStore,
    memory_tools,
)
from contextfold.storage import MemoryStore as InMemoryStore
from contextfold.storage import SQLiteStore
from contextfold.storage.session import SessionStore
from tests.conftest import TRACES_DIR, load_trace


def _bash(i: int, command: str) -> tuple[Message, Message]:
    call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": command}))
    return assistant(None, [call]), tool(f"c{i}", "")


def _history() -> list[Message]:
    msgs: list[Message] = [
        user(
            "Please migrate the service to Python 3.12. The API must stay backwards compatible. "
            "Never touch the tests/ folder. Set LOG_LEVEL=debug and use port 8443."
        ),
        user("需要把连接池改成 32。不要修改数据库迁移文件。"),
    ]
    commands = [
        "sed -i 's/3.11/3.12/' pyproject.toml",
        "cat > app/settings.py << 'EOF'\nDEBUG = False\nEOF",
        "echo 'x' > notes.txt 2>&1",
        "python - <<'PY'\nopen('app/main.py', 'w').write('print(1)')\nPY",
        "ls -la > /dev/null",
        "git apply fix.patch",
        "tee -a CHANGELOG.md <<< 'bump'",
    ]
    for i, c in enumerate(commands):
        msgs.extend(_bash(i, c))
    write = ToolCall(
        id="w1", name="write_file", arguments=json.dumps({"path": "docs/usage.md", "content": "x"})
    )
    msgs.extend([assistant("Writing docs.", [write]), tool("w1", "ok")])
    msgs.append(
        assistant(
            "Let's check whether it is fixed? The root cause is the pinned pydantic version. "
            "Tests pass and it works now."
        )
    )
    msgs.append(assistant("结论：连接池太小导致超时。"))
    return msgs


def test_extractive_facts_on_hand_built_history() -> None:
    facts = ExtractiveFactExtractor().extract(_history())
    by_kind: dict[str, list[str]] = {}
    for f in facts:
        by_kind.setdefault(f.kind, []).append(f.text)
        assert f.topic and f.source_uuid
    files = " | ".join(by_kind["file_change"])
    for path in (
        "pyproject.toml",
        "app/settings.py",
        "notes.txt",
        "app/main.py",
        "fix.patch",
        "CHANGELOG.md",
        "docs/usage.md",
    ):
        assert path in files, path
    assert "/dev/null" not in files
    assert any("Never touch the tests/ folder" in t for t in by_kind["constraint"])
    assert any("不要修改数据库迁移文件" in t for t in by_kind["constraint"])
    assert any("backwards compatible" in t for t in by_kind["requirement"])
    assert any(
        "需要把连接池改成 32" in t for t in by_kind["requirement"] + by_kind["configuration"]
    )
    config = " | ".join(by_kind["configuration"])
    assert "LOG_LEVEL=debug" in config and "3.12" in config
    conclusions = " | ".join(by_kind["conclusion"])
    assert "root cause is the pinned pydantic version" in conclusions
    assert "works now" in conclusions and "结论" in conclusions
    assert "Let's check" not in conclusions
    assert {f.topic for f in facts} <= {
        "requirements",
        "constraints",
        "configuration",
        "files",
        "conclusions",
    }


def _trace(fragment: str) -> list[Message]:
    path = next(p for p in sorted(TRACES_DIR.glob("*.json")) if fragment in p.name)
    return messages_from_openai(load_trace(path))


@pytest.mark.parametrize(
    ("fragment", "expected"),
    [
        ("deepseek_chat_test_1-100_django__django-15061", "django/forms/widgets.py (sed -i)"),
        ("deepseek_chat_dev_pvlib__pvlib-python-1606", "./pvlib/tools.py"),
        ("marshmallow-code__marshmallow-1867", "src/marshmallow/fields.py"),
        ("swe-bench-dev-easy_first_only", "pydicom/pixel_data_handlers/numpy_handler.py"),
    ],
)
def test_extractive_finds_file_changes_in_real_traces(fragment: str, expected: str) -> None:
    facts = ExtractiveFactExtractor().extract(_trace(fragment))
    changes = [f.text for f in facts if f.kind == "file_change"]
    assert any(expected in c for c in changes), changes


def _memory(workspace: Path, agent: str = "a", **kw: Any) -> MemoryStore:
    return MemoryStore(SessionStore(SQLiteStore(workspace), f"s-{agent}", agent), **kw)


def _files(store: MemoryStore) -> dict[str, str]:
    out = {"MEMORY.md": store.get()}
    out.update({name: store.get(name) for name in store.topics()})
    return out


def test_flush_is_incremental_and_idempotent(workspace: Path) -> None:
    store = _memory(workspace)
    facts = ExtractiveFactExtractor().extract(_history())
    n = store.flush(facts)
    assert n == len(facts) > 5
    before = _files(store)
    assert store.flush(facts) == 0
    # a fresh store (new process) knows the stored facts
    again = _memory(workspace)
    assert again.flush(facts) == 0
    assert (
        again.flush(
            [
                Fact(
                    topic="files",
                    text="  CHANGED   docs/usage.md (write_file). ",
                    kind="file_change",
                )
            ]
        )
        == 0
    )
    after = _files(again)
    assert before == after
    assert "MEMORY.md" in after and "files.md" in after and "constraints.md" in after
    index_lines = [x for x in after["MEMORY.md"].splitlines() if x.startswith("- ")]
    assert len(index_lines) == len(facts)
    assert all("](" in x for x in index_lines)
    new = Fact(topic="Deploy Notes", text="Staging runs on k8s 1.29", kind="configuration")
    assert again.flush([new, new]) == 1
    assert "Staging runs on k8s 1.29" in again.get("Deploy Notes")
    assert again.get("deploy-notes.md") == again.get("Deploy Notes")


def test_search_and_get(workspace: Path) -> None:
    store = _memory(workspace)
    assert store.search("anything") == []
    assert "no facts" in store.get()
    store.flush(ExtractiveFactExtractor().extract(_history()))
    hits = store.search("pydantic root cause")
    assert hits and "pydantic" in hits[0].text and hits[0].kind == "conclusion"
    assert hits[0].path == "conclusions.md"
    zh = store.search("连接池")
    assert zh and "连接池" in zh[0].text
    assert store.search("pyproject")[0].topic == "files"
    assert store.get().startswith("# Memory")
    assert "pyproject.toml" in store.get("files")
    for bad in ("../secrets", "../../etc/passwd", "/etc/passwd", "sub/../../x.md", "a/b.md"):
        with pytest.raises(UnsafeIdError):
            store.get(bad)


def test_memory_is_scoped_by_agent_with_an_opt_in_shared_scope(workspace: Path) -> None:
    facts = ExtractiveFactExtractor().extract(_history())
    alice = _memory(workspace, "alice")
    assert alice.flush(facts) == len(facts)
    bob = _memory(workspace, "bob")
    assert bob.search("pydantic root cause") == [] and "no facts" in bob.get()
    assert bob.flush(facts) == len(facts)  # his own copy, not alice's
    reader = _memory(workspace, "carol", read_agents=["alice"])
    assert reader.search("pydantic root cause")  # allow_agents semantics
    assert _memory(workspace, "dave", read_agents=["*"]).search("pydantic root cause")
    sharer = _memory(workspace, "erin", share=True)
    assert (
        sharer.flush(
            [Fact(topic="ops", text="The shared cache lives on redis", kind="configuration")]
        )
        == 1
    )
    assert [h.text for h in _memory(workspace, "frank").search("shared cache redis")] == [
        "The shared cache lives on redis"
    ]
    assert _memory(workspace, "frank").search("pydantic root cause") == []
    mem = InMemoryStore()
    m = MemoryStore(SessionStore(mem, "s", "x"))
    m.flush(facts)
    assert m.search("pydantic root cause")[0].text == alice.search("pydantic root cause")[0].text


def test_memory_tools(workspace: Path) -> None:
    store = _memory(workspace)
    store.flush(ExtractiveFactExtractor().extract(_history()))
    box = ToolBox(memory_tools(store))
    assert box.names() == ["memory_search", "memory_get"]
    text, err = box.run("memory_search", {"query": "port 8443", "limit": 3})
    assert not err and "8443" in text
    text, err = box.run("memory_get", {})
    assert not err and text.startswith("# Memory")
    text, err = box.run("memory_get", {"topic": "constraints"})
    assert not err and "Never touch" in text
    text, err = box.run("memory_get", {"topic": "../../etc/passwd"})
    assert err and "escapes" in text
    text, err = box.run("memory_get", {"topic": "nope"})
    assert err and "topics:" in text
    text, err = box.run("memory_search", {})
    assert err
    schema = box.schemas("anthropic")[0]
    assert schema["input_schema"]["required"] == ["query"]


@dataclass(frozen=True)
class _Result:
    text: str


class _Model:
    def __init__(self, answer: str | Exception) -> None:
        self.answer = answer
        self.calls: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], max_tokens: int = 1000) -> _Result:
        self.calls.append(messages)
        if isinstance(self.answer, Exception):
            raise self.answer
        return _Result(self.answer)


def test_llm_extractor_parses_json_lines() -> None:
    msgs = _history()
    answer = (
        "```json\n"
        '{"topic": "configuration", "kind": "configuration", "text": "Service uses port 8443", "msg": 0}\n'
        "not json at all\n"
        '{"topic": "files", "kind": "file-change", "text": "Edited pyproject.toml", "msg": 99}\n'
        '{"kind": "conclusion"}\n'
        "```"
    )
    model = _Model(answer)
    ex = LLMFactExtractor(model)
    assert isinstance(ex, FactExtractor)
    facts = ex.extract(msgs)
    assert [(f.kind, f.text) for f in facts] == [
        ("configuration", "Service uses port 8443"),
        ("file_change", "Edited pyproject.toml"),
    ]
    assert facts[0].source_uuid == msgs[0].uuid and facts[1].source_uuid is None
    assert ex.last_fallback is None
    prompt = model.calls[0][0]["content"]
    assert "LOG_LEVEL=debug" in prompt and "{messages}" not in prompt
    assert (
        LLMFactExtractor(_Model('[{"kind": "constraint", "text": "No tests"}]'))
        .extract(msgs)[0]
        .kind
        == "constraint"
    )
    assert LLMFactExtractor(_Model("NONE")).extract(msgs) == []


@pytest.mark.parametrize("answer", [RuntimeError("HTTP 500"), "I cannot do that."])
def test_llm_extractor_falls_back_to_extractive(answer: str | Exception) -> None:
    ex = LLMFactExtractor(_Model(answer))
    msgs = _history()
    facts = ex.extract(msgs)
    assert facts == ExtractiveFactExtractor().extract(msgs)
    assert ex.last_fallback and "extractive" in ex.last_fallback


def test_llm_prompt_must_have_placeholder() -> None:
    with pytest.raises(ValueError, match="messages"):
        LLMFactExtractor(_Model("x"), prompt="no placeholder")
