"""Request bodies: the messages a client resent unchanged are not decoded again (gateway/body.py),
and the result is always what the standard parser gives, with the same refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.gateway.body import MIN_BYTES, Arrival, BodyReader, TooDeep
from tests.gateway.gateway_helpers import running


def _messages(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(n):
        out.append({"role": "user", "content": f"step {i}: " + "output line [x] {y} é\n" * 20})
        out.append({"role": "assistant", "content": f"done {i}"})
    return out


def _raw(messages: list[Any], **extra: Any) -> bytes:
    return json.dumps({"model": "m", "messages": messages, **extra}).encode()


def test_a_follow_up_reuses_the_unchanged_messages_and_equals_json_loads() -> None:
    reader = BodyReader()
    msgs = _messages(200)
    first = _raw(msgs, stream=False)
    assert len(first) >= MIN_BYTES
    body, where = reader.read(first, 128)
    assert body == json.loads(first) and where is None and reader.reused == 0
    msgs2 = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    second = _raw(msgs2, stream=True, tools=[{"type": "function", "function": {"name": "x"}}])
    body2, where2 = reader.read(second, 128)
    assert body2 == json.loads(second) and where2 is None
    assert reader.reused == len(msgs)
    # the same objects as the previous parse: later stages compare by identity first
    assert all(a is b for a, b in zip(body2["messages"], body["messages"], strict=False))
    # non-ASCII written as UTF-8 (not escaped): byte offsets still line up
    utf8 = json.dumps({"model": "m", "messages": msgs2}, ensure_ascii=False).encode()
    reader.read(utf8, 128)
    more = json.dumps(
        {"model": "m", "messages": [*msgs2, {"role": "user", "content": "ü"}]}, ensure_ascii=False
    ).encode()
    body3, _ = reader.read(more, 128)
    assert body3 == json.loads(more) and reader.reused == len(msgs2)


def test_an_edited_old_message_is_decoded_again_from_where_it_changed() -> None:
    reader = BodyReader()
    msgs = _messages(200)
    reader.read(_raw(msgs), 128)
    edited = [dict(m) for m in msgs]
    edited[100] = {"role": "user", "content": "rewritten by the client"}
    raw = _raw(edited)
    body, _ = reader.read(raw, 128)
    assert body == json.loads(raw)
    assert reader.reused == 100  # the messages before the edit only


def _arrived(reader: BodyReader, raw: bytes, size: int) -> Arrival:
    arrival = reader.arrival()
    for i in range(0, len(raw), size):
        arrival.feed(raw[i : i + size])
    return arrival


@pytest.mark.parametrize("size", [100, 4096, 65536])
def test_a_body_compared_while_it_arrives_reuses_what_the_bytes_say(size: int) -> None:
    reader = BodyReader()
    msgs = _messages(200)
    first = _raw(msgs)
    body, _ = reader.read(first, 128, _arrived(reader, first, size))
    assert body == json.loads(first) and reader.reused == 0
    grown = _raw([*msgs, {"role": "user", "content": "go on"}])
    body2, _ = reader.read(grown, 128, _arrived(reader, grown, size))
    assert body2 == json.loads(grown) and reader.reused == len(msgs)
    assert all(a is b for a, b in zip(body2["messages"], body["messages"], strict=False))
    # an old message changed in place (same length): found by the chunks' comparison
    edited = [dict(m) for m in msgs]
    edited[30] = {**msgs[30], "content": str(msgs[30]["content"]).upper()}
    raw = _raw([*edited, {"role": "user", "content": "go on"}])
    assert len(raw) == len(grown)
    body3, _ = reader.read(raw, 128, _arrived(reader, raw, size))
    assert body3 == json.loads(raw) and reader.reused == 30
    # an arrival fed other bytes than the body read tells nothing: the body is compared again
    other = reader.arrival()
    other.feed(raw[: len(raw) // 2])
    body4, _ = reader.read(raw, 128, other)
    assert body4 == json.loads(raw) and reader.reused == len(msgs) + 1


def test_new_messages_are_checked_as_a_whole_body_would_be() -> None:
    reader = BodyReader()
    msgs = _messages(200)
    reader.read(_raw(msgs), 128)
    # a lone surrogate in a new message is found and named
    bad = _raw([*msgs, {"role": "user", "content": "a\ud800b"}])
    _, where = reader.read(bad, 128)
    assert where == f"messages[{len(msgs)}].content"
    # too deep in a new message
    deep: Any = "x"
    for _ in range(10):
        deep = [deep]
    with pytest.raises(TooDeep):
        reader.read(_raw([*msgs, {"role": "user", "content": deep}]), 8)
    # not JSON after the known part: the standard parser's error
    broken = _raw([*msgs, {"role": "user", "content": "x"}])[:-3] + b"}"
    with pytest.raises(ValueError) as err:
        reader.read(broken, 128)
    with pytest.raises(ValueError) as std:
        json.loads(broken)
    assert str(err.value) == str(std.value)
    # a refused body is not remembered: its valid prefix still is, from the first read
    reader.read(_raw(msgs), 128)
    assert reader.reused == len(msgs)


def test_irregular_bodies_go_through_the_standard_parser() -> None:
    reader = BodyReader()
    msgs = _messages(200)
    dup = _raw(msgs)[:-1] + b', "messages": [{"role": "user", "content": "last wins"}]}'
    body, _ = reader.read(dup, 128)
    assert body == json.loads(dup) and len(body["messages"]) == 1
    spaced = json.dumps({"model": "m", "messages": msgs}, indent=2).encode()
    body2, _ = reader.read(spaced, 128)
    assert body2 == json.loads(spaced)
    body3, _ = reader.read(
        json.dumps({"model": "m", "messages": [*msgs, {}]}, indent=2).encode(), 128
    )
    assert reader.reused == len(msgs) and body3["messages"][-1] == {}
    utf16 = json.dumps({"model": "m", "messages": msgs}).encode("utf-16")
    assert reader.read(utf16, 128)[0] == json.loads(utf16)


def test_a_long_conversation_over_http_follow_ups_reuse_and_refuse_alike(tmp_path: Path) -> None:
    msgs = _messages(150)
    headers = {"content-type": "application/json"}
    with running(tmp_path) as (fake, gw):
        url = gw.url + "/v1/chat/completions"

        def post(messages: list[Any]) -> httpx.Response:
            return httpx.post(url, content=_raw(messages), headers=headers, timeout=60)

        first = post(msgs)
        assert first.status_code == 200
        answer = first.json()["choices"][0]["message"]
        msgs += [
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": "go"},
        ]
        second = post(msgs)
        assert second.status_code == 200
        # what the upstream got is the same conversation (reused objects or not)
        sent = fake.received[-1].body["messages"]
        assert sent[-1] == {"role": "user", "content": "go"}
        assert sent[0] == msgs[0]
        bad = post([*msgs, {"role": "user", "content": "a\ud800b"}])
        assert bad.status_code == 400
        assert f"messages[{len(msgs)}].content" in bad.json()["error"]["message"]
        again = post([*msgs, {"role": "user", "content": "fine"}])
        assert again.status_code == 200


def _intact(reader: BodyReader) -> list[int]:
    """Positions of the remembered bodies whose shared message objects no longer equal what
    their bytes parse to (some stage of a request changed an object in place)."""
    bad = []
    for j, known in enumerate(reader.remembered()):
        again = json.loads(known.raw)["messages"][: len(known.ends)]
        if again != known.messages:
            bad.append(j)
    return bad


def test_no_stage_of_a_turn_changes_the_parsed_objects_later_requests_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader hands the same parsed message objects to every request that resends them;
    a stage that changed one in place (rendering, compaction, the gateway's tools, recording
    the answer) would change what every later request forwards. A long trajectory with tool
    calls through a small window (offloads, summaries, the emergency path), resent by a
    stateless client with and without the upstream's answers, on both chat routes."""
    import contextfold.gateway.app as app_module
    from tests.gateway.gateway_helpers import long_trace

    readers: list[BodyReader] = []

    class Recording(BodyReader):
        def __init__(self) -> None:
            super().__init__()
            readers.append(self)

    monkeypatch.setattr(app_module, "BodyReader", Recording)
    trace = long_trace(100)
    cuts = [k for k in range(40, len(trace)) if trace[k - 1]["role"] in ("tool", "user")][::6]
    headers = {"content-type": "application/json", "authorization": "Bearer sk-shared"}
    with running(tmp_path, context_window=12_000) as (_fake, gw):
        (reader,) = readers
        url = gw.url + "/v1/chat/completions"
        reused = 0
        for k in cuts:
            msgs = [dict(m) for m in trace[:k]]
            raw = _raw(msgs, stream=False)
            resp = httpx.post(url, content=raw, headers=headers, timeout=120)
            assert resp.status_code == 200, resp.text[:300]
            reused = max(reused, reader.reused)
            assert _intact(reader) == [], f"after the request of {k} messages"
        assert reused > 40  # the objects were shared (else the check proves nothing)
        # Anthropic's route: cache markers the gateway moves, system apart
        url = gw.url + "/v1/messages"
        turns: list[Any] = []
        for i in range(60):
            text = f"step {i}: " + "line of output from the tool\n" * 60
            turns.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
                    ],
                }
            )
            turns.append({"role": "assistant", "content": f"noted {i}"})
            if i >= 40 and i % 5 == 0:
                body = {
                    "model": "claude-x",
                    "max_tokens": 64,
                    "system": "Be brief.",
                    "messages": [*turns, {"role": "user", "content": "go"}],
                }
                resp = httpx.post(
                    url,
                    content=json.dumps(body).encode(),
                    headers={**headers, "anthropic-version": "2023-06-01"},
                    timeout=120,
                )
                assert resp.status_code == 200, resp.text[:300]
                assert _intact(reader) == []
    # the check itself finds a changed object
    known = reader.remembered()[-1]
    known.messages[-1]["content"] = "changed in place"
    assert _intact(reader) != []


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value  # ``levels`` arrays deep


@pytest.mark.parametrize("limit", [1, 2, 3, 8, 128])
def test_a_new_long_body_is_refused_exactly_where_it_nests_past_the_limit(limit: int) -> None:
    """A big body read whole checks only the values with more brackets than the levels they
    may hold; the verdict is always that of counting every level."""
    msgs = _messages(200)
    # brackets in strings do not count as levels (the messages' text is full of them)
    assert len(_raw(msgs)) >= MIN_BYTES
    cases: list[tuple[bytes, int]] = [(_raw(msgs), 3)]
    for levels in (limit - 3, limit - 2, limit - 1, limit):
        if levels < 1:
            continue
        # in a message (object 1, messages 2, the message 3, its content from 4 on)
        deep_msg = [*msgs, {"role": "user", "content": _nested(levels)}]
        cases.append((_raw(deep_msg), 3 + levels))
        # in another top-level member (object 1, the member's value from 2 on)
        cases.append((_raw(msgs, tools=_nested(levels)), max(3, 1 + levels)))
        # in a string only: no level at all
        cases.append((_raw(msgs, note=json.dumps(_nested(levels + 5))), 3))
    for raw, depth in cases:
        reader = BodyReader()
        if depth > limit:
            with pytest.raises(TooDeep):
                reader.read(raw, limit)
        else:
            body, _ = reader.read(raw, limit)
            assert body == json.loads(raw)


def test_a_body_nested_past_the_scanners_own_limit_is_refused_as_too_deep() -> None:
    raw = b'{"model": "m", "messages": [' + b"[" * 5000 + b"]" * 5000 + b"]}"
    raw += b" " * MIN_BYTES
    with pytest.raises(TooDeep):
        BodyReader().read(raw, 128)


def test_a_long_body_both_too_deep_and_broken_is_refused_as_too_deep() -> None:
    pad = " " * MIN_BYTES
    for broken in (b"1 2", b'"\\q"', b'"a\x01b"', b"1"):
        inner = b"[" * 20 + broken + b"]" * (20 if broken != b"1" else 19)
        raw = b'{"model": "m", "pad": "' + pad.encode() + b'", "a": ' + inner + b', "messages": []}'
        with pytest.raises(TooDeep):
            BodyReader().read(raw, 8)
