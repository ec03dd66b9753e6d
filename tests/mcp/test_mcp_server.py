"""``contextfold mcp`` through the MCP SDK's own client: stdio (a spawned ``python -m
contextfold mcp``) and streamable HTTP on 127.0.0.1, over a workspace written by replaying a
real trajectory through ContextManager at a small window."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contextfold.engine.manager import ContextManager
from tests.conftest import load_trace, trace_files

try:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
except ImportError:
    if os.environ.get("CONTEXTFOLD_REQUIRE_ALL") == "1":
        raise
    pytest.skip(
        "the mcp SDK is not installed: pip install '.[mcp]' in the checkout",
        allow_module_level=True,
    )

SRC = str(Path(__file__).resolve().parents[2] / "src")
TOOLS = {
    "recall",
    "read_offloaded",
    "session_list",
    "session_history",
    "session_search",
    "memory_search",
    "memory_get",
}


@dataclass
class Replayed:
    workspace: Path
    call_id: str  # a tool output that was offloaded (and indexed as evidence)
    original: str  # its exact text as the agent saw it
    evidence_id: str
    command: str
    path: str  # the offloaded file, as the placeholder in the view names it


def _replay(ws: Path, session: str, agent: str, window: int, trace: str) -> ContextManager:
    path = next(p for p in trace_files() if trace in p.name)
    cm = ContextManager(workspace=ws, session_id=session, agent_id=agent, context_window=window)
    for i, msg in enumerate(load_trace(path)):
        if msg.get("role") == "assistant" and i > 0:
            cm.prepare()
        cm.add(msg)
    return cm


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    ws = tmp_path_factory.mktemp("mcp-ws")
    cm = _replay(ws, "sa", "a", 8_000, "django-15213")
    _replay(ws, "sb", "b", 16_000, "pydicom")
    originals = {m.tool_call_id: m.text for m in cm.history if m.tool_call_id}
    pointers = {p.tool_use_id: p for p in cm.recovery.store.pointers() if p.tool_use_id}
    # the longest offloaded output that is also evidence: a multi-line, many-KB text
    candidates = [k for k in cm.offloaded() if k in originals and k in pointers]
    assert candidates, "the replay at 8000 tokens offloaded nothing"
    call_id = max(candidates, key=lambda k: len(originals[k]))
    assert len(originals[call_id]) > 2_000
    p = pointers[call_id]
    path = cm.offloaded()[call_id].path
    return Replayed(ws, call_id, originals[call_id], p.id, p.command or "", path)


def _text(result: Any) -> str:
    assert len(result.content) == 1
    return str(result.content[0].text)


def _stdio(ws: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "contextfold", "mcp", "--workspace", str(ws), *extra],
        env={"PYTHONPATH": SRC},
    )


async def _exercise_agent_a(client: Client, r: Replayed) -> None:
    listed = await client.list_tools()
    by_name = {t.name: t for t in listed.tools}
    assert set(by_name) == TOOLS
    assert by_name["recall"].input_schema["required"] == ["sessionId"]
    assert "evidence_id" in by_name["recall"].input_schema["properties"]

    res = await client.call_tool("session_list", {})
    assert not res.is_error and "- sa (agent a" in _text(res) and "- sb " not in _text(res)

    res = await client.call_tool("session_history", {"sessionId": "sa", "lastN": 3})
    assert not res.is_error and _text(res).startswith("Session sa (agent a): messages")

    res = await client.call_tool("session_search", {"query": "Traceback", "limit": 3})
    assert not res.is_error and "session sa seq" in _text(res)

    # recall by evidence id: the exact original text, byte for byte
    res = await client.call_tool(
        "recall", {"sessionId": "sa", "evidence_id": r.evidence_id, "max_chars": 10**6}
    )
    assert not res.is_error, _text(res)
    head, body = _text(res).split("\n-----\n", 1)
    assert "sha256 verified" in head
    assert body == r.original

    # recall by query finds it among the hits
    res = await client.call_tool(
        "recall", {"sessionId": "sa", "query": r.command or "Traceback", "k": 5}
    )
    assert not res.is_error and "hit(s) for" in _text(res)

    # read_offloaded by tool call id: the same text, as lines
    res = await client.call_tool(
        "read_offloaded", {"sessionId": "sa", "id": r.call_id, "limit": 100_000}
    )
    assert not res.is_error, _text(res)
    header, lines = _text(res).split("\n", 1)
    assert "sha256 ok" in header
    assert lines == r.original.removesuffix("\n")
    res = await client.call_tool(
        "read_offloaded", {"sessionId": "sa", "path": r.path, "offset": 1, "limit": 2}
    )
    assert not res.is_error and "lines 2-3 of" in _text(res), _text(res)
    assert _text(res).split("\n")[1:3] == r.original.split("\n")[1:3]

    res = await client.call_tool("memory_search", {"query": "django"})
    assert not res.is_error
    res = await client.call_tool("memory_get", {})
    assert not res.is_error and _text(res).startswith("# Memory")

    # bad input is a tool error the model can read, never a crash
    res = await client.call_tool("recall", {"sessionId": "sa"})
    assert res.is_error and "give query" in _text(res)
    res = await client.call_tool("recall", {"sessionId": "../../etc", "query": "x"})
    assert res.is_error and "not allowed" in _text(res)
    res = await client.call_tool("read_offloaded", {"sessionId": "nope", "id": "x"})
    assert res.is_error and "no session 'nope'" in _text(res)


async def _scoping_agent_b(client: Client, r: Replayed) -> None:
    """Agent b sees its own session and none of agent a's."""
    res = await client.call_tool("session_list", {})
    assert "- sb (agent b" in _text(res) and "- sa " not in _text(res)
    for tool, args in (
        ("recall", {"sessionId": "sa", "evidence_id": r.evidence_id}),
        ("recall", {"sessionId": "sa", "query": "Traceback"}),
        ("read_offloaded", {"sessionId": "sa", "id": r.call_id}),
        ("session_history", {"sessionId": "sa"}),
        ("session_search", {"query": "Traceback", "sessionId": "sa"}),
        ("session_list", {"agentId": "a"}),
    ):
        res = await client.call_tool(tool, args)
        assert res.is_error, (tool, _text(res))
        assert "access denied" in _text(res) or "does not belong" in _text(res), _text(res)
        assert r.original[:200] not in _text(res)
    res = await client.call_tool("session_search", {"query": "Traceback"})
    assert "session sa " not in _text(res)


def test_stdio_lists_and_calls_every_tool(replayed: Replayed) -> None:
    async def go() -> None:
        async with Client(_stdio(replayed.workspace, "--agent-id", "a")) as client:
            await _exercise_agent_a(client, replayed)

    asyncio.run(go())


def test_stdio_scoping_by_agent_id(replayed: Replayed) -> None:
    async def go() -> None:
        async with Client(_stdio(replayed.workspace, "--agent-id", "b")) as client:
            await _scoping_agent_b(client, replayed)
        # allow_agents semantics: b may read a's sessions when a is allowed
        allowed = _stdio(replayed.workspace, "--agent-id", "b", "--allow-agent", "a")
        async with Client(allowed) as client:
            res = await client.call_tool(
                "recall",
                {"sessionId": "sa", "evidence_id": replayed.evidence_id, "max_chars": 10**6},
            )
            assert not res.is_error
            assert _text(res).split("\n-----\n", 1)[1] == replayed.original

    asyncio.run(go())


@pytest.fixture
def http_server(replayed: Replayed) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    argv = ["mcp", "--workspace", str(replayed.workspace), "--agent-id", "a", "--http"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextfold", *argv, "--port", "0"],
        env={**os.environ, "PYTHONPATH": SRC},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "serving" in line or not line:
                break
        match = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert match, f"no URL announced: {line!r} (exit {proc.poll()})"
        yield match.group(1), proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_streamable_http_on_loopback(
    replayed: Replayed, http_server: tuple[str, subprocess.Popen[str]]
) -> None:
    url, _ = http_server
    assert url.startswith("http://127.0.0.1:")

    async def go() -> None:
        async with Client(url) as client:
            await _exercise_agent_a(client, replayed)
            # a session written after the server started is found (the index catches up)
            cm = ContextManager(workspace=replayed.workspace, session_id="sa2", agent_id="a")
            cm.add({"role": "user", "content": "zebra-quokka migration plan"})
            res = await client.call_tool("session_search", {"query": "zebra quokka"})
            assert "session sa2" in _text(res)
            res = await client.call_tool("session_list", {})
            assert "- sa2 (agent a" in _text(res)

    asyncio.run(go())


def test_missing_workspace_and_unsupported_store_are_clear(tmp_path: Path) -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "contextfold", "mcp", *argv],
            env={**os.environ, "PYTHONPATH": SRC},
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = run("--workspace", str(tmp_path / "missing"))
    assert done.returncode == 2 and f"no workspace at {tmp_path / 'missing'}" in done.stderr
    # a PostgreSQL URL is opened; an unreachable server is a clear error without the password
    done = run("--store", "postgresql://user:secret@127.0.0.1:1/x")
    assert done.returncode == 3 and "contextfold:" in done.stderr, done.stderr  # 3: the store
    assert "secret" not in done.stderr and "Traceback" not in done.stderr
    done = run("--store", f"file://{tmp_path / 'missing'}")
    assert done.returncode == 2 and "no workspace at" in done.stderr
    done = run("--port", "8000")
    assert done.returncode == 2 and "--port needs --http" in done.stderr


def test_the_example_client_runs(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "mcp_client.py"
    done = subprocess.run(
        [sys.executable, str(example), str(tmp_path / "ws")],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tools: recall, read_offloaded, session_list")
    assert "| sha256 ok]" in done.stdout and "sha256 verified" in done.stdout


def test_stdio_over_a_postgresql_store() -> None:
    """`contextfold mcp --store postgresql://...` serves sessions a manager wrote to PostgreSQL
    (no local files): scoped listing and a byte-exact recall."""
    from tests.support.pg_support import drop_schema, new_schema_name, require_postgres

    url = require_postgres()
    schema = new_schema_name()
    store_url = f"{url}?schema={schema}"
    try:
        trace = next(p for p in trace_files() if "django-15213" in p.name)
        cm = ContextManager(store=store_url, session_id="pg-s", context_window=8_000, agent_id="a")
        for msg in load_trace(trace)[:60]:
            if msg.get("role") == "user":
                cm.prepare()
            cm.add(msg)
        cm.prepare()
        offloaded = {k: v for k, v in cm.offloaded().items()}
        originals = {m.tool_call_id: m.text for m in cm.history if m.tool_call_id}
        call_id = next(k for k in offloaded if k in originals)
        cm.close()
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "contextfold", "mcp", "--store", store_url, "--agent-id", "a"],
            env={"PYTHONPATH": SRC},
        )

        async def go() -> None:
            async with Client(params) as client:
                res = await client.call_tool("session_list", {})
                assert not res.is_error and "- pg-s (agent a" in _text(res), _text(res)
                res = await client.call_tool(
                    "read_offloaded", {"sessionId": "pg-s", "id": call_id, "limit": 100_000}
                )
                assert not res.is_error, _text(res)
                assert originals[call_id].splitlines()[0] in _text(res)

        asyncio.run(go())
    finally:
        drop_schema(url, schema)
