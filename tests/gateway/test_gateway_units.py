"""Gateway pieces on their own: SSE framing, config layering, CLI, fingerprints and the
mapping of views back to the client's objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfold.core.messages import Message
from contextfold.errors import ConfigError, InvalidMessageError
from contextfold.gateway.config import load_config
from contextfold.gateway.convert import (
    ViewItem,
    fingerprint,
    parse_anthropic,
    parse_openai,
    render_anthropic,
    render_openai,
)
from contextfold.gateway.metrics import Metrics
from contextfold.gateway.sessions import check_store, client_identity
from contextfold.gateway.sse import SSEParser, encode

REPO = Path(__file__).resolve().parents[2]


def test_sse_events_keep_their_exact_bytes_across_any_chunking() -> None:
    stream = (
        b'event: message_start\r\ndata: {"a": 1}\r\n\r\n'
        b": keep-alive comment\n\n"
        b'data: {"b":\n'
        b"data: 2}\n\n"
        b"event: ping\rdata: {}\r\r"
        b"data: [DONE]\n\n"
    )
    for size in (1, 2, 3, 7, len(stream)):
        parser = SSEParser()
        events = []
        for i in range(0, len(stream), size):
            events.extend(parser.feed(stream[i : i + size]))
        events.extend(parser.flush())
        assert b"".join(e.raw for e in events) == stream
        assert [e.event for e in events] == ["message_start", None, None, "ping", None]
        assert events[0].json() == {"a": 1}
        assert events[2].json() == {"b": 2}
        assert events[4].data == "[DONE]" and events[4].json() is None
    assert encode({"x": "é"}, "delta") == 'event: delta\ndata: {"x": "é"}\n\n'.encode()


def test_config_layers_file_then_env_then_flags(tmp_path: Path) -> None:
    toml = tmp_path / "gw.toml"
    toml.write_text(
        '[gateway]\nupstream = "https://api.example.test"\nport = 9000\ncontext_window = 50000\n'
        '[gateway.windows]\n"claude-x" = 200000\n',
        encoding="utf-8",
    )
    env = {"CONTEXTFOLD_GATEWAY_PORT": "9100", "CONTEXTFOLD_GATEWAY_GATEWAY_TOOLS": "false"}
    cfg = load_config(file=toml, env=env, overrides={"port": None, "store": "/tmp/x"})
    assert (cfg.upstream, cfg.port, cfg.store, cfg.gateway_tools) == (
        "https://api.example.test",
        9100,
        "/tmp/x",
        False,
    )
    assert cfg.window_for("claude-x") == 200_000 and cfg.window_for("other") == 50_000
    assert load_config(file=toml, env=env, overrides={"port": 1}).port == 1
    assert cfg.host == "127.0.0.1"  # loopback unless told otherwise
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        toml.write_text('upstream = "http://x"\ncolour = "red"\n', encoding="utf-8")
        load_config(file=toml, env={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        toml.write_text("upstream = \n", encoding="utf-8")
        load_config(file=toml, env={})
    with pytest.raises(ConfigError, match="needs an upstream"):
        load_config(env={})
    with pytest.raises(ConfigError, match="http"):
        load_config(env={"CONTEXTFOLD_GATEWAY_UPSTREAM": "file:///etc/passwd"})
    with pytest.raises(ConfigError, match="PORT"):
        load_config(
            env={"CONTEXTFOLD_GATEWAY_UPSTREAM": "http://x", "CONTEXTFOLD_GATEWAY_PORT": "many"}
        )


def test_stores_the_gateway_accepts_and_a_clear_error_for_others() -> None:
    check_store("postgresql://postgres@127.0.0.1/test")  # psycopg is installed: accepted
    check_store("./folder")
    with pytest.raises(ConfigError, match="workspace folder or a postgresql:// URL"):
        check_store("mysql://root@127.0.0.1/db")


def test_cli_serve_help_and_a_clear_error_without_upstream(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("CONTEXTFOLD_GATEWAY_UPSTREAM", None)
    out = subprocess.run(
        [sys.executable, "-m", "contextfold", "serve", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0
    assert "--upstream" in out.stdout and "ANTHROPIC_BASE_URL" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "contextfold", "serve", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "upstream" in out.stderr and "Traceback" not in out.stderr


def test_client_identity_is_a_hash_not_the_key() -> None:
    ident = client_identity({"authorization": "Bearer sk-secret"})
    assert "sk-secret" not in ident and len(ident) == 16
    assert ident != client_identity({"authorization": "Bearer sk-other"})


def test_fingerprints_ignore_what_clients_change_between_resends() -> None:
    plain = Message(role="assistant", content="done")
    sdk = Message(
        role="assistant",
        content=({"type": "text", "text": "done", "cache_control": {"type": "ephemeral"}},),
    )
    thinking = Message(
        role="assistant",
        content=(
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "done "},
        ),
    )
    assert fingerprint(plain) == fingerprint(sdk) == fingerprint(thinking)
    assert fingerprint(plain) != fingerprint(Message(role="assistant", content="done!"))
    assert fingerprint(plain) != fingerprint(Message(role="user", content="done"))


def test_views_map_back_to_the_clients_own_objects() -> None:
    raw = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "go", "cache_control": {"type": "ephemeral"}}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "SIG"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "out"},
                {"type": "text", "text": "and?"},
            ],
        },
    ]
    conv = parse_anthropic(raw, "sys")
    items = [ViewItem(m, i) for i, m in enumerate(conv.neutral)]
    rendered = render_anthropic(items, conv)
    assert rendered == raw and all(a is b for a, b in zip(rendered, raw))
    # a changed tool result is rendered anew; its message's other parts follow it
    changed = list(items)
    changed[3] = ViewItem(conv.neutral[3].with_content("[offloaded]"), None)
    out = render_anthropic(changed, conv)
    assert out[0] is raw[0] and out[1] is raw[1]
    assert out[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "[offloaded]",
    }
    assert out[2]["content"][1] == {"type": "text", "text": "and?"}
    oconv = parse_openai([{"role": "user", "content": "x", "weird_field": 1}])
    assert render_openai([ViewItem(oconv.neutral[0], 0)], oconv)[0] is oconv.raw[0]


def test_metrics_render_prometheus_text() -> None:
    m = Metrics()
    m.inc("contextfold_gateway_requests_total", route="/v1/messages", status="200")
    m.observe("contextfold_gateway_added_latency_seconds", 0.003)
    text = m.render()
    assert 'contextfold_gateway_requests_total{route="/v1/messages",status="200"} 1' in text
    assert 'contextfold_gateway_added_latency_seconds_bucket{le="0.005"} 1' in text
    assert "contextfold_gateway_added_latency_seconds_count 1" in text
    assert json.dumps(text)  # plain text


def test_the_cli_does_not_import_the_gateway_stack_until_serve_runs() -> None:
    code = (
        "import sys, contextfold.cli as c; c.build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'httpx')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_gateways_workspace_store_serializes_its_writers(tmp_path: Path) -> None:
    import threading

    from contextfold.gateway.stores import SerialSQLiteStore, open_shared_store
    from contextfold.storage import NewEvent

    store = open_shared_store(str(tmp_path / "ws"))
    try:
        assert isinstance(store, SerialSQLiteStore)
        # a nested transaction joins the outer one (the lock is reentrant)
        with store.transaction() as outer, store.transaction() as inner:
            assert inner is outer
            outer.append("s0", [NewEvent(kind="m", data={})], expected_seq=0, agent_id="a")
        errors: list[BaseException] = []

        def write(k: int) -> None:
            try:
                for i in range(20):
                    with store.transaction() as tx:
                        ev = NewEvent(kind="m", data={"i": i})
                        tx.append(f"s{k}", [ev], expected_seq=i, agent_id="a")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(1, 9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert [store.head(f"s{k}") for k in range(9)] == [1] + [20] * 8
    finally:
        store.close()


def test_positions_of_a_conversation_nothing_was_retracted_from() -> None:
    from contextfold.gateway.session import Positions

    p = Positions(4, pending=True)
    assert len(p) == 5 and list(p) == [0, 1, 2, 3, -1] and p == [0, 1, 2, 3, -1]
    assert p[-1] == -1 and p[3] == 3 and p[1:3] == [1, 2] and p[:2] == [0, 1]
    assert list(Positions(3, pending=False)) == [0, 1, 2]
    with pytest.raises(IndexError):
        p[5]


@pytest.mark.parametrize("system", [["not a block"], 7, {"type": "text"}])
def test_anthropic_system_of_the_wrong_shape_is_a_clear_invalid_message(system: object) -> None:
    with pytest.raises(InvalidMessageError, match="system"):
        parse_anthropic([{"role": "user", "content": "hi"}], system)  # type: ignore[arg-type]
