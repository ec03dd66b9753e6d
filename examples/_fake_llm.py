"""A local stand-in for an OpenAI-compatible endpoint, so the examples run without network or keys.

``FakeOpenAIServer()`` listens on 127.0.0.1 (ephemeral port) and answers
``POST /v1/chat/completions`` like a coding agent: ``turns`` calls of ``run_command``, then a
``recall`` of the earliest failure, then a final answer quoting what recall returned. Request
number ``overflow_at`` is refused once with OpenAI's real ``context_length_exceeded`` error, so
the examples show contextfold's recovery. Point any OpenAI client at ``server.base_url``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def command_output(step: int) -> str:
    """A deterministic, chunky tool output; step 1 holds a failure worth recalling later."""
    lines = [f"$ pytest tests/test_module_{step}.py -q"]
    lines += [f"tests/test_module_{step}.py::test_case_{j} PASSED" for j in range(60)]
    if step == 1:
        lines += [
            "FAILED tests/test_module_1.py::test_parse_dates - ValueError: month must be in 1..12",
            'Traceback (most recent call last):\n  File "dates.py", line 42, in parse',
            "ValueError: month must be in 1..12",
        ]
    return "\n".join(lines)


class FakeOpenAIServer:
    def __init__(self, turns: int = 30, overflow_at: int = 12) -> None:
        self.turns = turns
        self.overflow_at = overflow_at
        self.requests = 0
        self.answered = 0
        self.largest_request_chars = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        n = self.answered
        self.answered += 1
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if n < self.turns:
            args = {"step": n, "command": f"pytest tests/test_module_{n}.py -q"}
            message["tool_calls"] = [_call(f"call_{n}", "run_command", args)]
        elif n == self.turns:
            args = {"query": "FAILED test_parse_dates ValueError month", "k": 1}
            message["tool_calls"] = [_call(f"call_{n}", "recall", args)]
        else:
            recalled = str(messages[-1].get("content") or "")
            found = "month must be in 1..12" in recalled
            message["content"] = f"Done. Recalled the old failure: {found}."
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests += 1
                size = len(json.dumps(body["messages"]))
                fake.largest_request_chars = max(fake.largest_request_chars, size)
                if fake.requests == fake.overflow_at:
                    status, payload = 400, {"error": {
                        "message": "This model's maximum context length is 8192 tokens. "
                        f"However, your messages resulted in {size // 3} tokens.",
                        "type": "invalid_request_error", "param": "messages",
                        "code": "context_length_exceeded",
                    }}  # fmt: skip
                else:
                    status, payload = 200, fake._reply(body["messages"])
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
