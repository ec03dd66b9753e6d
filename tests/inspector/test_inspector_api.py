"""The inspector's JSON API over real HTTP (``contextfold ui``'s server and the gateway's
``/ui``), against a store filled by replaying a bundled trajectory."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module

require_module("starlette")
require_module("uvicorn")
httpx = require_module("httpx")

from contextfold.engine.export import records_of  # noqa: E402
from contextfold.inspector.server import InspectorServer  # noqa: E402
from contextfold.storage import open_store  # noqa: E402
from tests.gateway.gateway_helpers import running  # noqa: E402
from tests.inspector.inspector_support import Replayed, replay  # noqa: E402


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    return replay(tmp_path_factory.mktemp("inspector") / "ws")


@pytest.fixture
def server(replayed: Replayed) -> Iterator[InspectorServer]:
    store = open_store(str(replayed.folder))
    srv = InspectorServer(store, port=0, token="secret-token-123").start()
    try:
        yield srv
    finally:
        srv.stop()
        store.close()


def _get(srv: InspectorServer, path: str, **kw: Any) -> httpx.Response:
    return httpx.get(srv.url + path, timeout=30, **kw)


def _tool_outputs(replayed: Replayed) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"]
        for m in replayed.messages
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    }


def test_sessions_timeline_and_records_agree(server: InspectorServer, replayed: Replayed) -> None:
    body = _get(server, "api/sessions").json()
    (row,) = body["sessions"]
    assert row["session_id"] == replayed.session_id
    assert row["messages"] == len(replayed.messages)
    assert 0 < row["view_tokens"] < row["history_tokens"]
    store = open_store(str(replayed.folder))
    try:
        records = records_of(store, replayed.session_id)
    finally:
        store.close()
    assert row["compactions"] == len(records) >= 2
    tl = _get(server, f"api/sessions/{replayed.session_id}").json()
    assert len(tl["calls"]) == replayed.calls
    assert [(c["id"], c["tier"], c["tokens_after"]) for c in tl["compactions"]] == [
        (r.id, r.tier.value, r.tokens_after) for r in records
    ]
    # the history only grows; after a compaction the view is what the record says, plus growth
    hist = [c["history_tokens"] for c in tl["calls"]]
    assert hist == sorted(hist)
    for c in tl["compactions"]:
        call = tl["calls"][c["call"] - 1]
        assert call["compaction"] == c["number"]
        assert call["view_tokens"] >= c["tokens_after"]
        assert call["view_tokens"] < call["history_tokens"]
    # filter and bounds
    assert _get(server, "api/sessions?q=SQLFLUFF").json()["total"] == 1
    assert _get(server, "api/sessions?q=nothing-like-it").json()["sessions"] == []
    for bad in ("limit=0", "limit=201", "offset=-1", "limit=x", "q=" + "a" * 501):
        r = _get(server, "api/sessions?" + bad)
        assert r.status_code == 400 and r.json()["error"], bad


def test_view_at_a_call_marks_what_left_and_restores_it_byte_exact(
    server: InspectorServer, replayed: Replayed
) -> None:
    sid = replayed.session_id
    tl = _get(server, f"api/sessions/{sid}").json()
    last = tl["compactions"][-1]
    view = _get(server, f"api/sessions/{sid}/view?call={last['call']}").json()
    rows = view["messages"]
    assert view["boundary"] == last["boundary"] > 0
    assert view["summary"] == last["summary"] != ""
    assert [r["position"] for r in rows] == list(range(view["position"]))
    assert rows[0]["status"] == "pinned"  # the system prompt
    summarized = [r for r in rows if r["status"] == "summarized"]
    assert summarized and all(r["position"] < view["boundary"] for r in summarized)
    assert all(r["compaction"] == last["number"] for r in summarized)
    assert all(r["status"] in ("kept", "pinned", "offloaded") for r in rows[view["boundary"] :])
    # every offloaded tool output comes back exactly, its sha256 checked against the entry
    outputs = _tool_outputs(replayed)
    offloaded = [r for r in rows if r["offload"]]
    assert offloaded
    for r in offloaded:
        got = _get(server, f"api/sessions/{sid}/offload?call_id={r['tool_call_id']}").json()
        assert got["text"] == outputs[r["tool_call_id"]]
        assert got["sha256_ok"] is True
        assert got["sha256"] == hashlib.sha256(got["text"].encode()).hexdigest()
    # evidence of a summarized tool result: the evidence store's restore, sha256 checked
    with_evidence = [r for r in summarized if r["evidence"] and r["role"] == "tool"]
    assert with_evidence
    for r in with_evidence[:3]:
        got = _get(server, f"api/sessions/{sid}/evidence?id={r['evidence']}").json()
        assert got["text"] == outputs[r["tool_call_id"]] and got["sha256_ok"] is True
    # any message of the log, as stored
    pos = summarized[0]["position"]
    got = _get(server, f"api/sessions/{sid}/message?position={pos}").json()
    original = replayed.messages[pos].get("content") or ""
    assert got["text"] == original and got["role"] == replayed.messages[pos]["role"]


def _heads(replayed: Replayed) -> list[tuple[str, int]]:
    store = open_store(str(replayed.folder))
    try:
        return [(i.session_id, store.head(i.session_id)) for i in store.sessions()]
    finally:
        store.close()


def test_recall_memory_and_bad_input(server: InspectorServer, replayed: Replayed) -> None:
    sid = replayed.session_id
    before = _heads(replayed)
    hits = _get(server, f"api/sessions/{sid}/recall", params={"q": "pytest L060", "k": 3}).json()
    assert hits["hits"] and any("test session starts" in h["text"] for h in hits["hits"])
    facts = _get(server, f"api/sessions/{sid}/memory").json()["facts"]
    assert any(f["kind"] == "file_change" for f in facts)
    cases = {
        f"api/sessions/{sid}/view?call=0": 400,
        f"api/sessions/{sid}/view?call=100000": 400,
        f"api/sessions/{sid}/recall?q=": 400,
        f"api/sessions/{sid}/recall?q=x&k=51": 400,
        f"api/sessions/{sid}/evidence?id=../../etc/passwd": 400,
        f"api/sessions/{sid}/offload?call_id=a%20b": 400,
        f"api/sessions/{sid}/offload?call_id=call_unknown": 404,
        f"api/sessions/{sid}/message?position=100000": 400,
        "api/sessions/no-such-session": 404,
        "api/sessions/.hidden": 400,
    }
    for path, status in cases.items():
        r = _get(server, path)
        assert r.status_code == status, (path, r.text)
        assert "error" in r.json()
    # a page under another host name (DNS rebinding) is refused
    r = _get(server, "api/sessions", headers={"host": "evil.example:80"})
    assert r.status_code == 403
    # reading, restoring and searching wrote nothing
    assert _heads(replayed) == before


def test_the_page_and_its_files_load_nothing_from_elsewhere(server: InspectorServer) -> None:
    page = _get(server, "")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "http" not in page.text.replace('name="viewport"', "")
    for name in ("app.js", "app.css"):
        r = _get(server, "static/" + name)
        assert r.status_code == 200 and "http://" not in r.text.replace("http://www.w3.org", "")
    assert _get(server, "static/../app.py").status_code == 404
    assert _get(server, "static/index.py").status_code == 404


def test_delete_needs_the_token(tmp_path: Path) -> None:
    done = replay(tmp_path / "ws", "to-delete")
    store = open_store(str(done.folder))
    srv = InspectorServer(store, port=0, token="right-token").start()
    try:
        url = srv.url + "api/sessions/to-delete"
        assert httpx.delete(url, timeout=30).status_code == 401
        r = httpx.delete(url, headers={"x-contextfold-token": "wrong"}, timeout=30)
        assert r.status_code == 401 and "right-token" not in r.text
        assert store.session("to-delete") is not None
        r = httpx.delete(url, headers={"authorization": "Bearer right-token"}, timeout=30)
        assert r.status_code == 200 and r.json()["messages"] == len(done.messages)
        assert store.session("to-delete") is None
        assert httpx.get(url, timeout=30).status_code == 404
    finally:
        srv.stop()
        store.close()


def _chat(url: str, headers: dict[str, str], msgs: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": msgs}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_a_gateway_token_the_clients_share_never_opens_the_inspector(tmp_path: Path) -> None:
    """The inspector shows every tenant's sessions: with only a client token, /ui is not
    served, and a client's token does not open it when an inspector token is set."""
    with running(tmp_path, auth_token="gw-token-abcdef") as (_fake, gw):
        auth = {"x-contextfold-token": "gw-token-abcdef"}
        assert httpx.get(gw.url + "/ui/api/sessions", headers=auth, timeout=30).status_code == 404
    with running(tmp_path, auth_token="gw-token-abcdef", ui_token="ui-token-123456") as (_f, gw):
        for given in ("gw-token-abcdef", "wrong-token-0000"):
            got = httpx.get(
                gw.url + "/ui/api/sessions", headers={"x-contextfold-token": given}, timeout=30
            )
            assert got.status_code == 401


def test_the_gateway_serves_the_inspector_at_ui_behind_its_token(tmp_path: Path) -> None:
    token = "ui-token-abcdef"
    with running(tmp_path, auth_token="gw-token-abcdef", ui_token=token) as (_fake, gw):
        ok = {"x-contextfold-token": "gw-token-abcdef", "authorization": "Bearer sk-tenant"}
        ok["x-contextfold-session"] = "live"
        msgs = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hello"},
        ]
        assert _chat(gw.url, ok, msgs).status_code == 200
        page = httpx.get(gw.url + "/ui", timeout=30, follow_redirects=True)
        assert page.status_code == 200 and "contextfold inspector" in page.text
        assert httpx.get(gw.url + "/ui/api/sessions", timeout=30).status_code == 401
        auth = {"x-contextfold-token": token}
        listed = httpx.get(gw.url + "/ui/api/sessions", headers=auth, timeout=30).json()
        (row,) = listed["sessions"]
        sid = row["session_id"]
        # the answer is written with the client's next request (which resends it)
        assert row["messages"] == 2 and token not in json.dumps(listed)
        head = httpx.get(gw.url + f"/ui/api/sessions/{sid}/head", headers=auth, timeout=30)
        # the session grows while the page watches it (it polls the head)
        msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
        assert _chat(gw.url, ok, msgs).status_code == 200
        later = httpx.get(gw.url + f"/ui/api/sessions/{sid}/head", headers=auth, timeout=30)
        assert later.json()["head"] > head.json()["head"]
        tl = httpx.get(gw.url + f"/ui/api/sessions/{sid}", headers=auth, timeout=30).json()
        assert tl["messages"] == 4 and [c["position"] for c in tl["calls"]] == [2]
        # deleting: the token, then the session is gone from the store and the gateway
        r = httpx.delete(gw.url + f"/ui/api/sessions/{sid}", timeout=30)
        assert r.status_code == 401
        r = httpx.delete(gw.url + f"/ui/api/sessions/{sid}", headers=auth, timeout=30)
        assert r.status_code == 200
        r = httpx.get(gw.url + f"/ui/api/sessions/{sid}", headers=auth, timeout=30)
        assert r.status_code == 404
