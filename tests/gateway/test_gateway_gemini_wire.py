"""Gemini contents <-> neutral messages, without a server: call ids that do not depend on the
client's, thought signatures kept, views rendered back, the --resume repair, side calls,
stream assembly, error bodies and the overflow message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold.core.overflow import overflow_kind
from contextfold.errors import InvalidMessageError
from contextfold.gateway.convert import ViewItem, fingerprint
from contextfold.gateway.gemini import (
    PAIRING_MESSAGE,
    parse_gemini,
    render_gemini,
    response_message,
)
from contextfold.gateway.gemini_api import (
    declaration,
    declarations,
    drop_abandoned_calls,
    error_body,
    estimate_tokens,
    fit_side_call,
    input_tokens,
    is_side_call,
    pair_side_call,
    with_declarations,
)
from contextfold.gateway.gemini_repair import drop_repeated_responses
from contextfold.gateway.gemini_stream import GeminiAssembler, merge_parts, without_calls
from contextfold.gateway.upstream import UpstreamError
from contextfold.providers.limits import stated_limit

SIG = "c2lnbmF0dXJl"


def _call(name: str, args: dict[str, Any], cid: str | None = None) -> dict[str, Any]:
    fc: dict[str, Any] = {"name": name, "args": args}
    if cid:
        fc["id"] = cid
    return {"functionCall": fc, "thoughtSignature": SIG}


def _resp(name: str, output: str, cid: str | None = None) -> dict[str, Any]:
    fr: dict[str, Any] = {"name": name, "response": {"output": output}}
    if cid:
        fr["id"] = cid
    return {"functionResponse": fr}


def _conversation(with_ids: bool) -> list[dict[str, Any]]:
    a = "bash-1" if with_ids else None
    b = "bash-2" if with_ids else None
    return [
        {"role": "user", "parts": [{"text": "list files"}]},
        {"role": "model", "parts": [{"text": "Looking."}, _call("bash", {"command": "ls"}, a)]},
        {"role": "user", "parts": [_resp("bash", "a.txt", a)]},
        {"role": "model", "parts": [_call("bash", {"command": "ls"}, b)]},
        {"role": "user", "parts": [_resp("bash", "a.txt b.txt", b), {"text": "now what?"}]},
    ]


def test_neutral_form_and_call_ids_independent_of_the_clients() -> None:
    conv = parse_gemini(_conversation(True), {"parts": [{"text": "be brief"}]})
    roles = [m.role for m in conv.neutral]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
    assert conv.owner == [-1, 0, 1, 2, 3, 4, 4]
    first, second = conv.neutral[2].tool_calls[0], conv.neutral[4].tool_calls[0]
    assert first.id != second.id  # the same call twice: two ids
    assert conv.neutral[3].tool_call_id == first.id and conv.neutral[5].tool_call_id == second.id
    assert conv.neutral[5].text == "a.txt b.txt" and conv.neutral[6].text == "now what?"
    # the same conversation without the client's ids has the same fingerprints
    bare = parse_gemini(_conversation(False), {"parts": [{"text": "be brief"}]})
    assert bare.fingerprints == conv.fingerprints


def test_recorded_answer_is_the_turn_the_client_resends() -> None:
    contents = _conversation(True)[:3]
    conv = parse_gemini(contents, None)
    answer = {"role": "model", "parts": [_call("bash", {"command": "ls"})]}
    recorded = response_message(answer, conv)
    # the client writes its own id into the call and answers it
    resent = parse_gemini(_conversation(True), None)
    assert fingerprint(recorded) == resent.fingerprints[3]


def test_thought_parts_and_signatures_survive_a_rendering_anew() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {
            "role": "model",
            "parts": [
                {"text": "thinking hard", "thought": True, "thoughtSignature": "t1"},
                {"text": "Done.", "thoughtSignature": "t2"},
                _call("bash", {"command": "ls"}, "x-1"),
            ],
        },
        {"role": "user", "parts": [_resp("bash", "out", "x-1")]},
    ]
    conv = parse_gemini(contents, None)
    # every message rendered anew (no history index): the same wire parts come back
    items = [ViewItem(m, None) for m in conv.neutral]
    rendered = render_gemini(items, conv)
    assert rendered == contents
    # unchanged turns are the client's own objects
    same = render_gemini([ViewItem(m, i) for i, m in enumerate(conv.neutral)], conv)
    assert same == contents and all(a is b for a, b in zip(same, contents))


def test_a_compacted_response_is_rendered_with_its_new_text_and_merged() -> None:
    conv = parse_gemini(_conversation(True), None)
    items = [ViewItem(m, i) for i, m in enumerate(conv.neutral)]
    short = conv.neutral[4].with_content("[offloaded: 11 chars]")
    items[4] = ViewItem(short, None)
    rendered = render_gemini(items, conv)
    assert len(rendered) == 5
    last = rendered[-1]
    assert last["role"] == "user"
    assert last["parts"][0]["functionResponse"] == {
        "name": "bash",
        "id": "bash-2",
        "response": {"output": "[offloaded: 11 chars]"},
    }
    assert last["parts"][1] == {"text": "now what?"}


def test_structured_responses_are_kept_when_unchanged() -> None:
    response = {"functionResponse": {"name": "read", "response": {"content": [1, 2]}}}
    contents = [
        {"role": "user", "parts": [{"text": "read"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {}}}]},
        {"role": "user", "parts": [response, {"text": "and?"}]},
    ]
    conv = parse_gemini(contents, None)
    assert json.loads(conv.neutral[2].text) == {"content": [1, 2]}
    items = [ViewItem(m, None) for m in conv.neutral]
    assert render_gemini(items, conv)[2]["parts"][0] == response


@pytest.mark.parametrize(
    "contents",
    [
        [  # a call never answered
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [_call("bash", {})]},
            {"role": "user", "parts": [{"text": "and?"}]},
        ],
        [  # an answer to no call
            {"role": "user", "parts": [{"text": "go"}, _resp("bash", "x")]},
        ],
        [  # two calls, one answer
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [_call("bash", {"a": 1}), _call("bash", {"a": 2})]},
            {"role": "user", "parts": [_resp("bash", "x")]},
        ],
    ],
)
def test_broken_pairing_is_refused_in_geminis_words(contents: list[Any]) -> None:
    with pytest.raises(InvalidMessageError, match="number of function response parts"):
        parse_gemini(contents, None)


def test_bad_shapes_are_refused_with_where() -> None:
    with pytest.raises(InvalidMessageError, match="contents must be a non-empty list"):
        parse_gemini([], None)
    with pytest.raises(InvalidMessageError, match=r"contents\[0\].role"):
        parse_gemini([{"role": "system", "parts": [{"text": "x"}]}], None)
    with pytest.raises(InvalidMessageError, match=r"contents\[0\].parts must be a list"):
        parse_gemini([{"role": "user", "parts": "x"}], None)
    with pytest.raises(InvalidMessageError, match="functionCall needs a name"):
        parse_gemini([{"role": "model", "parts": [{"functionCall": {"args": {}}}]}], None)
    with pytest.raises(InvalidMessageError, match="tools"):
        declarations({"functionDeclarations": []})


def test_snake_case_fields_are_read_too() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"function_call": {"name": "bash", "args": {}}}]},
        {"role": "user", "parts": [{"function_response": {"name": "bash", "response": {}}}]},
    ]
    conv = parse_gemini(contents, {"parts": [{"text": "sys"}]})
    assert [m.role for m in conv.neutral] == ["system", "user", "assistant", "tool"]
    assert declarations([{"function_declarations": [{"name": "a"}]}]) == [{"name": "a"}]
    assert is_side_call({"generation_config": {"response_mime_type": "application/json"}})


def test_the_resume_repeat_is_dropped_and_nothing_else() -> None:
    contents = _conversation(True)
    repeated = [*contents[:3], {"role": "user", "parts": [_resp("bash", "a.txt", "bash-1")]}]
    repaired, dropped = drop_repeated_responses(repeated + contents[3:])
    assert dropped == 1 and repaired == contents
    # the same response again in the same turn, too
    doubled = [*contents[:2], {"role": "user", "parts": [contents[2]["parts"][0]] * 2}]
    assert drop_repeated_responses(doubled) == (contents[:3], 1)
    # a different second answer is not a repeat: left for the 400
    other = [*contents[:3], {"role": "user", "parts": [_resp("bash", "changed", "bash-1")]}]
    assert drop_repeated_responses(other) == (other, 0)
    # the same result in a later turn (the same command run again) is no repeat either
    again = [*contents[:3], contents[1], contents[2]]
    assert drop_repeated_responses(again) == (again, 0)


def test_side_calls_are_json_mode_requests() -> None:
    assert is_side_call({"generationConfig": {"responseMimeType": "application/json"}})
    assert is_side_call({"generationConfig": {"responseJsonSchema": {"type": "object"}}})
    assert is_side_call({"generationConfig": {"responseSchema": {"type": "OBJECT"}}})
    assert not is_side_call({"generationConfig": {"temperature": 0}})
    assert not is_side_call({"generationConfig": {"responseMimeType": "text/plain"}})
    assert not is_side_call({})


def test_gateway_tools_as_function_declarations() -> None:
    ours = declaration(
        {
            "type": "function",
            "function": {"name": "recall", "description": "d", "parameters": {"type": "object"}},
        }
    )
    assert ours == {
        "name": "recall",
        "description": "d",
        "parametersJsonSchema": {"type": "object"},
    }
    tools = [{"googleSearch": {}}, {"functionDeclarations": [{"name": "bash"}]}]
    merged = with_declarations(tools, [ours])
    assert merged[1]["functionDeclarations"] == [{"name": "bash"}, ours]
    assert tools[1]["functionDeclarations"] == [{"name": "bash"}]  # the client's untouched
    assert with_declarations(None, [ours]) == [{"functionDeclarations": [ours]}]


def test_stream_assembly_joins_text_and_keeps_signatures() -> None:
    asm = GeminiAssembler()
    chunks = [
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "hm", "thought": True}]}}
            ]
        },
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]},
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "lo", "thoughtSignature": "s"}]}}
            ]
        },
        {
            "candidates": [
                {"content": {"role": "model", "parts": [_call("bash", {})]}, "finishReason": "STOP"}
            ],
            "usageMetadata": {"promptTokenCount": 42, "totalTokenCount": 50},
        },
    ]
    for c in chunks:
        asm.add(c)
    assert asm.finish_reason == "STOP" and input_tokens(asm.usage) == 42
    assert asm.content()["parts"] == [
        {"text": "hm", "thought": True},
        {"text": "Hello", "thoughtSignature": "s"},
        _call("bash", {}),
    ]
    assert asm.call_names() == ["bash"]
    assert merge_parts([{"text": "a"}, {"text": "b", "thought": True}]) == [
        {"text": "a"},
        {"text": "b", "thought": True},
    ]


def test_the_gateways_calls_are_taken_out_of_a_chunk() -> None:
    chunk = {
        "candidates": [{"content": {"parts": [_call("recall", {}), _call("bash", {})]}}],
        "usageMetadata": {"promptTokenCount": 1},
    }
    out = without_calls(chunk, ("recall",))
    assert out["candidates"][0]["content"]["parts"] == [_call("bash", {})]
    only_ours = {"candidates": [{"content": {"parts": [_call("recall", {})]}}]}
    assert without_calls(only_ours, ("recall",)) is None
    done = {"candidates": [{"content": {"parts": [_call("recall", {})]}, "finishReason": "STOP"}]}
    assert without_calls(done, ("recall",))["candidates"][0]["content"]["parts"] == []


def test_errors_and_the_overflow_message() -> None:
    assert error_body(400, "bad") == {
        "error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}
    }
    assert error_body(404, "x")["error"]["status"] == "NOT_FOUND"
    message = "The input token count (9000) exceeds the maximum number of tokens allowed (8192)."
    raw = json.dumps(error_body(400, message)).encode()
    err = UpstreamError(400, raw, {})
    assert overflow_kind(err) == "gemini"
    limit = stated_limit(err)
    assert limit is not None and (limit.limit, limit.prompt_tokens) == (8192, 9000)
    pairing = UpstreamError(400, json.dumps(error_body(400, PAIRING_MESSAGE)).encode(), {})
    assert overflow_kind(pairing) is None


def _loop_check(outputs: int, size: int) -> dict[str, Any]:
    """A loop-detection side request: recent turns with big tool outputs, then the question."""
    contents: list[Any] = []
    for k in range(outputs):
        contents.append({"role": "model", "parts": [_call("bash", {"n": k}, f"b-{k}")]})
        contents.append({"role": "user", "parts": [_resp("bash", f"{k}:" + "z" * size, f"b-{k}")]})
    contents.insert(0, {"role": "user", "parts": [{"text": "Recent history:"}]})
    contents.append({"role": "user", "parts": [{"text": "Is the agent in a loop? " * 5}]})
    return {
        "contents": contents,
        "systemInstruction": {"parts": [{"text": "You are a loop detector."}]},
        "generationConfig": {"responseMimeType": "application/json"},
    }


def test_a_side_call_is_fit_into_the_window() -> None:
    body = _loop_check(6, 8_000)
    assert estimate_tokens(body) > 10_000
    same, cut = fit_side_call(body, 100_000)
    assert same is body and cut == 0
    fitted, cut = fit_side_call(body, 10_000)
    assert cut > 0 and estimate_tokens(fitted) <= 8_500
    assert fitted["contents"][-1] == body["contents"][-1]  # the question stays whole
    assert body["contents"][2]["parts"][0]["functionResponse"]["response"]["output"].endswith("z")
    outputs = [
        p["functionResponse"]["response"]["output"]
        for c in fitted["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]
    assert any("characters left out by contextfold" in o for o in outputs)
    assert all(o.split(":")[0].isdigit() for o in outputs)  # heads kept
    # many small turns: the oldest are dropped, and it never starts with the model's turn
    small, cut = fit_side_call(_loop_check(200, 300), 3_000)
    assert estimate_tokens(small) <= 3_000 * 0.85 and cut > 0
    first = small["contents"][0]
    assert first["role"] == "user" and "functionResponse" not in first["parts"][0]


def test_a_side_call_loses_its_unpaired_calls_and_responses() -> None:
    call = {"functionCall": {"name": "bash", "args": {}}}
    body = {
        "contents": [
            {"role": "user", "parts": [_resp("bash", "orphan")]},
            {"role": "user", "parts": [{"text": "history:"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [_resp("bash", "ok")]},
            {"role": "model", "parts": [{"text": "Next."}, call]},  # Gemini CLI's loop check
            {"role": "user", "parts": [{"text": "Is it looping?"}]},
        ]
    }
    fixed, changed = pair_side_call(body)
    assert changed == 2
    assert fixed["contents"] == [
        body["contents"][1],
        body["contents"][2],
        body["contents"][3],
        {"role": "model", "parts": [{"text": "Next."}]},
        body["contents"][5],
    ]
    assert pair_side_call(fixed) == (fixed, 0)


def test_a_call_abandoned_by_loop_detection_is_left_out_and_nothing_else() -> None:
    """Gemini CLI's loop feedback follows a call it never answered: the call goes, the
    model's text in that turn stays; a partial answer is left for Gemini's own 400."""
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [_call("bash", {"a": 1})]},
        {"role": "user", "parts": [_resp("bash", "ok")]},
        {"role": "model", "parts": [{"text": "Step 2."}, _call("bash", {"a": 2})]},
        {"role": "user", "parts": [{"text": "System: Potential loop detected."}]},
        {"role": "model", "parts": [_call("bash", {"a": 3})]},
        {"role": "user", "parts": [{"text": "again"}]},
    ]
    repaired, dropped = drop_abandoned_calls(contents)
    assert dropped == ["bash", "bash"]
    assert repaired == [
        *contents[:3],
        {"role": "model", "parts": [{"text": "Step 2."}]},
        contents[4],
        contents[6],
    ]
    conv = parse_gemini(repaired, None)
    assert [m.role for m in conv.neutral] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "user",
    ]
    assert drop_abandoned_calls(repaired) == (repaired, [])
    partial = [
        contents[0],
        {"role": "model", "parts": [_call("bash", {"a": 1}), _call("bash", {"a": 2})]},
        {"role": "user", "parts": [_resp("bash", "x")]},
    ]
    assert drop_abandoned_calls(partial) == (partial, [])


def test_a_resent_history_parses_as_a_fresh_one() -> None:
    from contextfold.gateway import convert_cache as convert

    full = _conversation(True)
    parse_gemini(full, None)
    # the client rewrote the first tool result: the common part ends with the model's call
    edited = json.loads(json.dumps(full))
    edited[2]["parts"][0]["functionResponse"]["response"]["output"] = "(masked)"
    reused = parse_gemini(edited, None)
    with convert._PARSED_LOCK:
        convert._PREFIX.clear()
    fresh = parse_gemini(edited, None)
    assert reused.neutral[2].text == "(masked)"
    assert reused.fingerprints == fresh.fingerprints
    assert [m.tool_call_id for m in reused.neutral] == [m.tool_call_id for m in fresh.neutral]
    with pytest.raises(InvalidMessageError, match="number of function response parts"):
        parse_gemini([*full[:2], {"role": "user", "parts": [{"text": "no answer"}]}], None)


def _masked_resp(name: str, cid: str, suffix: str) -> dict[str, Any]:
    output = f"<tool_output_masked>\nOutput: run 0 ...\nsaved to /tmp/{cid}_{suffix}.txt\n"
    output += "</tool_output_masked>"
    return {"functionResponse": {"id": cid, "name": name, "response": {"output": output}}}


def test_the_resume_repeat_masked_by_gemini_cli_is_dropped() -> None:
    """Gemini CLI masks large old outputs under a file name of its own (random): on
    ``--resume`` the two copies of one result differ by that name, or one is masked and the
    other not; they are the same result, and the unmasked copy stays."""
    contents = _conversation(True)
    model, answer = contents[1], contents[2]
    call_id = answer["parts"][0]["functionResponse"]["id"]
    masked = [_masked_resp("bash", call_id, "5wybw"), _masked_resp("bash", call_id, "1hnurj")]
    repaired, dropped = drop_repeated_responses(
        [contents[0], model, {"role": "user", "parts": masked}]
    )
    assert dropped == 1 and repaired[2]["parts"] == masked[:1]
    # masked first, the full output second: the full one stays, in the first one's place
    mixed = [masked[0], answer["parts"][0]]
    repaired, dropped = drop_repeated_responses(
        [contents[0], model, {"role": "user", "parts": mixed}]
    )
    assert dropped == 1 and repaired[2]["parts"] == [answer["parts"][0]]
