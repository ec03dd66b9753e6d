"""The gateway attacked from outside: real HTTP clients and raw sockets on 127.0.0.1 against a
real gateway (uvicorn, and ``contextfold serve`` in its own process) in front of the scripted
upstream. Each class of hole has its test; a seeded generator sends a few hundred hostile
bodies and no answer may be a 5xx or a dropped connection."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.gateway.cli import BackgroundServer
from contextfold.gateway.config import GatewayConfig, load_config
from tests.gateway.gateway_attacks import (
    MALFORMED_HTTP,
    SYSTEM,
    closed_within,
    deep_list,
    hostile_bodies,
    raw_exchange,
    raw_get,
    recorded_upstream,
    serve,
)
from tests.gateway.gateway_helpers import running
from tests.support import pg_support

TOKEN = "gw-secret-token-0123456789"
SEED = 17
BODIES = 400


def _gateway(tmp_path: Path, upstream: str, **config: Any) -> BackgroundServer:
    cfg = GatewayConfig(upstream=upstream, port=0, store=str(tmp_path / "ws"), **config).check()
    return BackgroundServer(cfg)


def _openai(url: str, headers: dict[str, str], messages: list[Any]) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": "m", "messages": messages},
        headers=headers,
        timeout=30,
    )


# ---------------------------------------------------------------------- the gateway's token


@pytest.mark.parametrize(
    "authorization",
    [f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer  {TOKEN}", f"Bearer {TOKEN}"],
)
def test_the_gateway_token_never_reaches_the_upstream(tmp_path: Path, authorization: str) -> None:
    fake, seen = recorded_upstream()
    try:
        with _gateway(tmp_path, fake.url, auth_token=TOKEN) as gw:
            auth = {"authorization": authorization, "x-api-key": "sk-tenant"}
            msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
            assert _openai(gw.url, auth, msgs).status_code == 200
            anthropic = {"model": "m", "max_tokens": 5, "messages": msgs[1:]}
            r = httpx.post(gw.url + "/v1/messages", json=anthropic, headers=auth, timeout=30)
            assert r.status_code == 200
            r = httpx.post(
                gw.url + "/v1/messages/count_tokens", json=anthropic, headers=auth, timeout=30
            )
            assert r.status_code == 200
            assert httpx.get(gw.url + "/v1/models", headers=auth, timeout=30).status_code == 200
            # the token in another header is not forwarded either
            sneaky = {"authorization": authorization, "x-api-key": TOKEN}
            httpx.get(gw.url + "/v1/models", headers=sneaky, timeout=30)
            # a wrong token is refused, whatever the case of the scheme
            wrong = {"authorization": "bearer not-the-token"}
            assert httpx.get(gw.url + "/v1/models", headers=wrong, timeout=30).status_code == 401
    finally:
        fake.stop()
    paths = {s.raw_path for s in seen}
    assert {
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/models",
    } <= paths
    for s in seen:
        assert all(TOKEN not in v for v in s.headers.values()), (s.raw_path, s.headers)
        assert s.headers.get("x-api-key") in ("sk-tenant", None)


def test_a_header_sent_twice_is_refused(tmp_path: Path) -> None:
    fake, seen = recorded_upstream()
    try:
        with _gateway(tmp_path, fake.url, auth_token=TOKEN) as gw:
            status, body = raw_get(
                gw.url,
                "/v1/models",
                f"Authorization: Bearer {TOKEN}\r\nAuthorization: Bearer sk-x\r\n",
            )
    finally:
        fake.stop()
    assert status == 400 and "authorization" in body["error"]["message"]
    assert not seen


# ---------------------------------------------------------------------- identity


def _session(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text
    return resp.headers["x-contextfold-session"]


def test_tenants_sharing_the_gateway_token_get_their_own_sessions(tmp_path: Path) -> None:
    fake, _seen = recorded_upstream()
    start = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "fix the bug"}]
    a = {"authorization": f"Bearer {TOKEN}", "x-api-key": "sk-tenant-a"}
    b = {"authorization": f"Bearer {TOKEN}", "x-api-key": "sk-tenant-b"}
    try:
        with _gateway(tmp_path, fake.url, auth_token=TOKEN) as gw:
            sa = _session(_openai(gw.url, a, start))
            sb = _session(_openai(gw.url, b, start))
            assert sa != sb  # same prompt and first message, different provider keys
            # B continues "A's" conversation: it lands in B's own session
            more = [
                *start,
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "B"},
            ]
            assert _session(_openai(gw.url, b, more)) == sb
            more_a = [*more[:-1], {"role": "user", "content": "A"}]
            assert _session(_openai(gw.url, a, more_a)) == sa
            # an explicit session name is bound to the credential
            named_a = _session(_openai(gw.url, {**a, "x-contextfold-session": "shared"}, start))
            secret = [
                *start,
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "A-only secret"},
            ]
            _openai(gw.url, {**a, "x-contextfold-session": "shared"}, secret)
            before_b = len(fake.received)
            named_b = _session(_openai(gw.url, {**b, "x-contextfold-session": "shared"}, start))
            fresh_b = _session(_openai(gw.url, {**b, "x-contextfold-session": "unused"}, start))
    finally:
        fake.stop()
    assert named_a != named_b
    # the answer to a taken name looks like the answer to a free one: no tell
    assert named_b.removeprefix("shared") == fresh_b.removeprefix("unused")
    b_bodies = [json.dumps(r.body) for r in fake.received[before_b:]]
    assert b_bodies and all("A-only secret" not in text for text in b_bodies)


def test_a_provider_credential_in_authorization_is_the_identity_without_a_token(
    tmp_path: Path,
) -> None:
    start = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "same start"}]
    with running(tmp_path) as (_fake, gw):
        one = _session(_openai(gw.url, {"authorization": "Bearer sk-one"}, start))
        two = _session(_openai(gw.url, {"authorization": "Bearer sk-two"}, start))
        goog = _session(_openai(gw.url, {"x-goog-api-key": "g-1"}, start))
    assert len({one, two, goog}) == 3


# ---------------------------------------------------------------------- redaction


def test_healthz_logs_and_errors_show_no_secret(tmp_path: Path) -> None:
    fake, _seen = recorded_upstream()
    upstream = fake.url.replace("http://", "http://user:hunter2-pw@") + "/v1"
    pg = pg_support.require_postgres()
    schema = pg_support.new_schema_name()
    store = (
        pg.replace("postgresql://postgres@", "postgresql://postgres:pg-pw-42@")
        + f"?schema={schema}"
    )
    env = {"CONTEXTFOLD_GATEWAY_AUTH_TOKEN": TOKEN}
    try:
        with serve(upstream, store, tmp_path, env=env) as (url, out, err):
            open_health = httpx.get(url + "/healthz", timeout=10).json()
            authorized = httpx.get(
                url + "/healthz", headers={"x-contextfold-token": TOKEN}, timeout=10
            ).json()
            denied = httpx.get(url + "/v1/models", headers={"authorization": "Bearer nope"})
            r = _openai(url, {"x-contextfold-token": TOKEN}, [{"role": "user", "content": "hi"}])
            metrics = httpx.get(url + "/metrics", headers={"x-contextfold-token": TOKEN}).text
    finally:
        fake.stop()
        pg_support.drop_schema(pg, schema)
    assert open_health == {"status": "ok", "version": open_health["version"]}
    assert authorized["upstream"].startswith("http://user:***@127.0.0.1")
    assert r.status_code == 200, r.text
    shown = out.read_text() + err.read_text() + json.dumps([open_health, authorized]) + denied.text
    shown += metrics + r.text
    for secret in ("hunter2-pw", "pg-pw-42", TOKEN):
        assert secret not in shown, secret
    assert "postgres:***@" in out.read_text()


# ---------------------------------------------------------------------- passthrough paths

ESCAPES = [
    "/v1/models/../../../admin",
    "/v1/models/..%2F..%2F..%2Fadmin",
    "/v1/models/%2e%2e/%2e%2e/%2e%2e/admin",
    "/v1/models/%2E%2E%2f%2E%2E%2fadmin",
    "/v1/models//admin",
    "/v1/models/..\\..\\admin",
    "/v1/models/.%2e/.%2e/admin",
    "/v1/models/%252e%252e/admin",
    "/v1/models/./x",
    "/v1/models/a%00b",
]


def test_passthrough_paths_stay_below_the_upstream_base(tmp_path: Path) -> None:
    fake, seen = recorded_upstream()
    try:
        with _gateway(tmp_path, fake.url + "/tenant/v1") as gw:
            answers = {path: raw_get(gw.url, path, "x-api-key: sk-t\r\n") for path in ESCAPES}
            ok_status, _ = raw_get(gw.url, "/v1/models/ft:gpt-4o:org", "x-api-key: sk-t\r\n")
            anthropic, body = raw_get(
                gw.url, "/v1/models/../../admin", "anthropic-version: 2023-06-01\r\n"
            )
    finally:
        fake.stop()
    for path, (status, answer) in answers.items():
        assert status == 404, (path, status)
        assert isinstance(answer, dict) and "error" in answer, (path, answer)
    assert anthropic == 404 and body["type"] == "error"
    assert ok_status == 404  # the fake has no such model route, but the request got there
    for s in seen:
        assert s.raw_path.startswith("/tenant/v1/"), s.raw_path
    assert [s.raw_path for s in seen] == ["/tenant/v1/models/ft:gpt-4o:org"]


# ---------------------------------------------------------------------- hostile bodies


def test_seeded_hostile_bodies_get_4xx_never_5xx_nor_a_dropped_connection(
    tmp_path: Path, record_property: Any
) -> None:
    cases = hostile_bodies(SEED, BODIES)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    with running(tmp_path) as (_fake, gw), httpx.Client(base_url=gw.url, timeout=60) as client:
        for route, label, body in cases:
            headers = {"content-type": "application/json", "x-api-key": "sk-fuzz"}
            if route == "/v1/messages":
                headers["anthropic-version"] = "2023-06-01"
            try:
                r = client.post(route, content=body, headers=headers)
            except httpx.HTTPError as exc:
                failures.append(f"{route} {label}: no answer ({type(exc).__name__})")
                continue
            statuses[r.status_code] += 1
            if r.status_code >= 500:
                failures.append(f"{route} {label}: {r.status_code} {r.text[:200]}")
            elif r.status_code >= 400:
                assert "error" in r.json(), (label, r.text)
        # the gateway still serves a well-formed request afterwards
        ok = client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "still there?"}]},
        )
    assert ok.status_code == 200
    assert not failures, failures
    tried = sum(statuses.values())
    fourxx = sum(n for s, n in statuses.items() if 400 <= s < 500)
    record_property("hostile_bodies", f"tried={tried} 4xx={fourxx} 5xx=0 2xx={tried - fourxx}")
    print(f"\nhostile bodies: tried {tried}, 4xx {fourxx}, 5xx 0, statuses {dict(statuses)}")
    assert tried == len(cases) >= BODIES


@pytest.mark.parametrize(
    ("label", "body", "where"),
    [
        ("dict role", {"messages": [{"role": {"a": 1}, "content": "x"}]}, "message 0"),
        (
            "list block type",
            {"messages": [{"role": "user", "content": [{"type": ["text"], "text": "x"}]}]},
            None,
        ),
        (
            "lone surrogate",
            {"messages": [{"role": "user", "content": "a\ud800b"}]},
            "messages[0].content",
        ),
        (
            "deep",
            {"messages": "DEEP"},
            "deeper than 128",
        ),
    ],
)
def test_each_hostile_class_gets_a_clear_400_naming_where(
    tmp_path: Path, label: str, body: dict[str, Any], where: str | None
) -> None:
    deep = b"[" * 1000 + b'{"role": "user", "content": "x"}' + b"]" * 1000
    raw = json.dumps({"model": "m", **body}).encode().replace(b'"DEEP"', deep)
    with running(tmp_path) as (_fake, gw):
        r = httpx.post(gw.url + "/v1/chat/completions", content=raw, timeout=30)
    if where is None:  # a valid request as far as the gateway is concerned
        assert r.status_code in (200, 400), r.text
    else:
        assert r.status_code == 400, r.text
        assert where in r.json()["error"]["message"], r.text


# ---------------------------------------------------------------------- limits


def test_limits_come_from_flags_env_and_file(tmp_path: Path) -> None:
    cfg = load_config(
        env={"CONTEXTFOLD_GATEWAY_MAX_MESSAGES": "50", "CONTEXTFOLD_GATEWAY_IDLE_TIMEOUT": "3"},
        overrides={"upstream": "http://127.0.0.1:1", "max_depth": 20, "header_timeout": 2.5},
    )
    assert (cfg.max_messages, cfg.idle_timeout, cfg.max_depth, cfg.header_timeout) == (
        50,
        3,
        20,
        2.5,
    )
    defaults = GatewayConfig()
    assert defaults.max_messages == 10_000 and defaults.max_depth == 128
    assert defaults.request_timeout > 0 and defaults.header_timeout > 0
    from contextfold.errors import ConfigError

    with pytest.raises(ConfigError, match="max_messages"):
        load_config(overrides={"upstream": "http://127.0.0.1:1", "max_messages": 0})


def test_a_huge_count_of_small_messages_is_refused_at_once_and_others_are_served(
    tmp_path: Path,
) -> None:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(100_000)
    ]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    with running(tmp_path) as (_fake, gw):
        r = httpx.post(gw.url + "/v1/chat/completions", content=body, timeout=60)
        other = _openai(gw.url, {}, [{"role": "user", "content": "me too"}])
    assert r.status_code == 413, r.text
    assert "100000 messages" in r.json()["error"]["message"]
    assert "--max-messages" in r.json()["error"]["message"]
    assert other.status_code == 200


def test_max_messages_and_max_depth_are_the_users_to_set(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 3
    with running(tmp_path, max_messages=5, max_depth=6) as (_fake, gw):
        r = _openai(gw.url, {}, msgs)
        deep = _openai(
            gw.url,
            {},
            [{"role": "user", "content": [{"type": "text", "text": "x", "x": deep_list(5)}]}],
        )
        fine = _openai(gw.url, {}, msgs[:5])
    assert r.status_code == 413
    assert deep.status_code == 400 and "deeper than 6" in deep.json()["error"]["message"]
    assert fine.status_code == 200


def test_idle_half_sent_and_oversized_connections_are_closed(tmp_path: Path) -> None:
    with running(tmp_path, header_timeout=0.5, idle_timeout=0.5, max_header_bytes=8192) as (
        _fake,
        gw,
    ):
        host, port = gw.url.split("//")[1].split(":")
        address = (host, int(port))
        with socket.create_connection(address) as idle:  # connects, sends nothing
            assert closed_within(idle, 20)
        with socket.create_connection(address) as half:
            half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
            assert closed_within(half, 20)
        with socket.create_connection(address) as big:
            big.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 20_000)
            assert closed_within(big, 20)
        with socket.create_connection(address) as slow:  # answered, then half a request
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            slow.settimeout(20)
            assert slow.recv(65536).startswith(b"HTTP/1.1 200")
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            assert closed_within(slow, 20)
        with socket.create_connection(address) as kept:  # answered, then idle: closed too
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            kept.settimeout(20)
            assert kept.recv(65536).startswith(b"HTTP/1.1 200")
            assert closed_within(kept, 20)
        # and a normal client is served afterwards
        assert httpx.get(gw.url + "/healthz", timeout=10).status_code == 200


def test_a_body_that_never_arrives_gets_408(tmp_path: Path) -> None:
    with running(tmp_path, request_timeout=0.5, header_timeout=30) as (_fake, gw):
        started = time.monotonic()
        answer = raw_exchange(
            gw.url,
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\nConnection: close\r\n\r\n{"model": ',
        )
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within" in answer
    assert waited < 25  # answered at the budget, not left hanging (generous bound)


def _gateway_of(gw: BackgroundServer) -> Any:
    """The Gateway object behind a background server's app (its routes are its methods)."""
    app = gw._server.config.app
    return next(r.endpoint.__self__ for r in app.routes if getattr(r, "path", "") == "/healthz")


def test_a_request_past_its_time_budget_gets_503_and_its_retry_succeeds(tmp_path: Path) -> None:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "budget"}]
    with running(tmp_path, request_timeout=1.0) as (fake, gw):
        registry = _gateway_of(gw).pipeline.registry
        with registry.store_lock:  # the store is stuck: opening the session waits
            late = _openai(gw.url, {}, msgs)
        retry = _openai(gw.url, {}, msgs)
        stored = registry.store.head(retry.headers["x-contextfold-session"])
    assert late.status_code == 503, late.text
    assert late.headers["retry-after"] and "within 1 s" in late.json()["error"]["message"]
    assert retry.status_code == 200, retry.text
    assert stored >= 2  # the system prompt and the message, once
    assert len(fake.accepted("/v1/chat/completions")) == 1  # the late one never went upstream


def test_fastjson_writes_lone_surrogates_as_escapes_never_raising() -> None:
    from contextfold.gateway import fastjson

    value = {"text": "a\ud800b", "key\udfff": ["\ud83d"], "ok": "é"}
    out = fastjson.dumps(value)
    assert json.loads(out) == value  # the same JSON value, as valid UTF-8 bytes
    out.decode("utf-8")


def test_an_explicit_session_name_too_long_for_the_credential_part_is_refused(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as (_fake, gw):
        r = _openai(gw.url, {"x-contextfold-session": "a" * 90}, [{"role": "user", "content": "x"}])
    assert r.status_code == 400 and "at most 76 characters" in r.text


def test_serve_flags_set_the_connection_limits(tmp_path: Path) -> None:
    fake, _seen = recorded_upstream()
    flags = ("--header-timeout", "0.5", "--idle-timeout", "0.5", "--max-messages", "3")
    try:
        with serve(fake.url, str(tmp_path / "ws"), tmp_path, *flags) as (url, _out, _err):
            host, port = url.split("//")[1].split(":")
            with socket.create_connection((host, int(port))) as idle:
                assert closed_within(idle, 20)
            r = _openai(url, {}, [{"role": "user", "content": str(i)} for i in range(4)])
    finally:
        fake.stop()
    assert r.status_code == 413 and "(3, --max-messages)" in r.text


def test_edge_checks_in_isolation() -> None:
    from contextfold.gateway.edge import confined_path, redact, too_deep
    from contextfold.gateway.upstream import Upstream

    assert confined_path("/v1/models/claude-3:latest") == "/v1/models/claude-3:latest"
    assert confined_path("/v1/models/org/model") == "/v1/models/org/model"
    for bad in ESCAPES:
        assert confined_path(bad) is None, bad
    up = Upstream("https://api.example.com:443/tenant/v1", 5.0, pools=1)
    assert up.confined_url("/v1/models/x") == "https://api.example.com:443/tenant/v1/models/x"
    assert up.confined_url("/v1/models/%2e%2e") is None
    text = "postgresql://u:pw1@h/db and https://a:b@c/?api_key=zz&x=1 token T0K3N"
    assert redact(text, "T0K3N") == (
        "postgresql://u:***@h/db and https://a:***@c/?api_key=***&x=1 token ***"
    )
    assert not too_deep(b'{"a": "[[[[[[[[[[[[", "b": [[1]]}', 3)
    assert too_deep(b'{"a": [[[1]]]}', 3)
    assert not too_deep(b'{"a": "\\\\\\"[[[[", "b": 1}', 1)


def test_malformed_http_is_answered_never_5xx_nor_dropped(tmp_path: Path) -> None:
    answers: dict[str, bytes] = {}
    with running(tmp_path, header_timeout=5, idle_timeout=2) as (fake, gw):
        for label, data in MALFORMED_HTTP.items():
            answers[label] = raw_exchange(gw.url, data, timeout=30)
        assert httpx.get(gw.url + "/healthz", timeout=10).status_code == 200
    for label, answer in answers.items():
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1.1 "), (label, answer[:200])
        assert int(status_line.split()[1]) < 500, (label, status_line)
    assert answers["non-ASCII header"].startswith(b"HTTP/1.1 400")
    assert b"not ASCII" in answers["non-ASCII header"]
    assert all(b"\xff" not in json.dumps(r.headers).encode() for r in fake.received)


def test_one_credential_keeps_the_identity_earlier_releases_gave_it() -> None:
    import hashlib

    from contextfold.gateway.sessions import client_identity

    def old(secret: str) -> str:
        return hashlib.sha256(("contextfold-gateway|" + secret).encode()).hexdigest()[:16]

    assert client_identity({"authorization": "Bearer sk-1"}) == old("Bearer sk-1")
    assert client_identity({"x-api-key": "sk-2"}) == old("sk-2")
    both = client_identity({"x-api-key": "sk-2", "authorization": "Bearer sk-1"})
    assert both not in (old("sk-2"), old("Bearer sk-1"))
