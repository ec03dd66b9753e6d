from __future__ import annotations

import json

from contextfold.compaction.summarizers.transcript import render_transcript, truncate_tool_arguments
from contextfold.core.messages import Message, ToolCall, assistant, tool, user
from contextfold.core.wire import messages_from_openai
from tests.conftest import load_trace, trace_files


def _write_call(call_id: str, name: str, content: str) -> ToolCall:
    args = {"path": "src/app.py", "content": content, "meta": {"notes": ["short", content]}}
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args))


def test_truncation_keeps_json_valid_and_originals_untouched() -> None:
    big = "x" * 3000 + "MIDDLE" + "y" * 3000 + ' "quoted" 中文 {braces}'
    history = [
        user("write the app"),
        assistant(None, [_write_call("c1", "write_file", big)]),
        tool("c1", "ok"),
        assistant(None, [_write_call("c2", "bash", big)]),  # not a matching tool
        tool("c2", "ok"),
    ]
    before = [json.loads(m.tool_calls[0].arguments) for m in history if m.tool_calls]
    out = truncate_tool_arguments(history, max_length=200)
    assert len(out) == len(history)
    assert out[0] is history[0] and out[2] is history[2]
    assert out[3] is history[3]  # bash is not in the default tool list
    changed = out[1]
    assert changed is not history[1]
    assert changed.uuid == history[1].uuid
    args = json.loads(changed.tool_calls[0].arguments)  # still valid JSON
    assert args["path"] == "src/app.py"
    assert "... [truncated] ..." in args["content"]
    assert "MIDDLE" not in args["content"]
    assert args["content"].startswith("xxx") and args["content"].endswith("{braces}")
    assert 180 <= len(args["content"]) <= 220
    assert args["meta"]["notes"][0] == "short"
    assert "... [truncated] ..." in args["meta"]["notes"][1]
    assert "中文" in changed.tool_calls[0].arguments  # ensure_ascii=False
    # the full history is untouched
    after = [json.loads(m.tool_calls[0].arguments) for m in history if m.tool_calls]
    assert after == before


def test_truncation_patterns_text_and_invalid_json() -> None:
    raw = ToolCall(id="c1", name="edit_notes", arguments="not json " + "z" * 500)
    msgs = [assistant(None, [raw, _write_call("c2", "edit_file", "short")])]
    out = truncate_tool_arguments(msgs, tools=["edit_*"], max_length=100, text="<cut>")
    calls = out[0].tool_calls
    assert "<cut>" in calls[0].arguments and len(calls[0].arguments) <= 100
    assert calls[1] is msgs[0].tool_calls[1]  # short value: unchanged object
    assert truncate_tool_arguments(msgs, tools=["other"], max_length=10)[0] is msgs[0]


def test_render_transcript_format() -> None:
    msgs = [
        Message(role="system", content="sys"),
        user("fix {the} bug"),
        assistant(
            "Let me look.",
            [ToolCall(id="call_1", name="bash", arguments='{"command": "ls"}')],
        ),
        tool("call_1", "a.py\n" + "line\n" * 2000),
        Message(
            role="user",
            content=(
                {"type": "text", "text": "see picture"},
                {"type": "image_url", "image_url": {}},
            ),
        ),
    ]
    text = render_transcript(msgs, max_tool_chars=100)
    assert "[system]: sys" in text
    assert "[user]: fix {the} bug" in text
    assert "[assistant]: Let me look." in text
    assert '[assistant -> tool_call bash(id=call_1)]: {"command": "ls"}' in text
    assert "[tool bash result id=call_1]: a.py" in text
    assert "characters omitted" in text
    assert "[user]: see picture\n[image]" in text
    assert len(text) < 600


def test_render_transcript_on_a_real_trace() -> None:
    path = trace_files()[0]
    msgs = messages_from_openai(load_trace(path))
    text = render_transcript(msgs, max_tool_chars=500)
    assert text.count("-> tool_call bash(") == sum(len(m.tool_calls) for m in msgs)
    assert render_transcript(msgs, max_tool_chars=500) == text
