"""A real local HTTP server that plays OpenAI / Anthropic, for driving the official SDKs.

``fake_llm_server`` (a pytest fixture; make it visible in a test module with
``from tests.support.http_fakes import fake_llm_server_fixture  # noqa: F401``) serves ``POST
/v1/chat/completions`` and ``POST /v1/messages`` on 127.0.0.1 with scripted responses:

    fake_llm_server.enqueue(200, openai_completion("hi"))
    fake_llm_server.enqueue(500, {"error": ...}, headers={"retry-after-ms": "1"})
    fake_llm_server.handler = lambda req: (200, openai_completion(req["model"]))

Queued responses are used first, then ``handler``. A request with nothing scripted gets a 400
that the SDKs do not retry (``x-should-retry: false``), so a missing script fails fast. Every
request is recorded in ``requests`` (path, lower-cased headers, parsed JSON).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Handler = Callable[[dict[str, Any]], tuple[int, Any]]


@dataclass(frozen=True, kw_only=True)
class Scripted:
    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (for timeout tests).
    delay: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any


class FakeLLMServer:
    def __init__(self) -> None:
        self.queue: deque[Scripted] = deque()
        self.handler: Handler | None = None
        self.requests: list[RecordedRequest] = []
        self.unscripted = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._make_handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def enqueue(
        self,
        status: int,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        with self._lock:
            self.queue.append(
                Scripted(status=status, body=body, headers=dict(headers or {}), delay=delay)
            )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, request_json: Any) -> Scripted:
        with self._lock:
            if self.queue:
                return self.queue.popleft()
            handler = self.handler
        if handler is not None:
            status, body = handler(request_json)
            return Scripted(status=status, body=body)
        with self._lock:
            self.unscripted += 1
        return Scripted(
            status=400,
            body={
                "error": {
                    "message": "fake_llm_server: no response scripted for this request",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            },
            headers={"x-should-retry": "false"},
        )

    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    parsed: Any = json.loads(raw) if raw else None
                except ValueError:
                    parsed = raw.decode("utf-8", "replace")
                with server._lock:
                    server.requests.append(
                        RecordedRequest(
                            method="POST",
                            path=self.path,
                            headers={k.lower(): v for k, v in self.headers.items()},
                            json=parsed,
                        )
                    )
                if self.path.split("?")[0] not in ("/v1/chat/completions", "/v1/messages"):
                    step = Scripted(
                        status=404, body={"error": {"message": f"no route {self.path}"}}
                    )
                else:
                    step = server._next(parsed)
                if step.delay:
                    time.sleep(step.delay)
                payload = (
                    step.body if isinstance(step.body, bytes) else json.dumps(step.body).encode()
                )
                try:
                    self.send_response(step.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for key, value in step.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout tests)
                    pass

        return _Handler


@pytest.fixture(name="fake_llm_server")
def fake_llm_server_fixture() -> Iterator[FakeLLMServer]:
    """A running :class:`FakeLLMServer`, closed after the test."""
    server = FakeLLMServer()
    try:
        yield server
    finally:
        server.close()


#: The same fixture under its own name, for ``from tests.support.http_fakes import fake_llm_server``
#: (ruff then reports F401 on the import and F811 on every test using it; importing
#: ``fake_llm_server_fixture`` avoids both).
fake_llm_server = fake_llm_server_fixture


# --------------------------------------------------------------------------- response bodies


def openai_completion(
    text: str,
    *,
    model: str = "gpt-test",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """A Chat Completions response body as OpenAI returns it."""
    return {
        "id": "chatcmpl-test123",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "system_fingerprint": "fp_test",
    }


def openai_error(
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def openai_context_length_error(limit: int = 128_000, used: int = 130_000) -> dict[str, Any]:
    """The 400 body OpenAI sends when the messages exceed the model's context window."""
    return openai_error(
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {used} tokens. Please reduce the length of the messages.",
        type="invalid_request_error",
        param="messages",
        code="context_length_exceeded",
    )


def openai_rate_limit_error() -> dict[str, Any]:
    return openai_error(
        "Rate limit reached for gpt-4o in organization org-test on tokens per min (TPM): "
        "Limit 30000, Used 29000, Requested 4000. Please try again in 2s.",
        type="tokens",
        code="rate_limit_exceeded",
    )


def anthropic_message(
    text: str,
    *,
    model: str = "claude-test",
    input_tokens: int = 13,
    output_tokens: int = 5,
    stop_reason: str = "end_turn",
) -> dict[str, Any]:
    """A Messages API response body as Anthropic returns it."""
    return {
        "id": "msg_test123",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def anthropic_error(message: str, *, type: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": type, "message": message}, "request_id": "req_test"}


def anthropic_prompt_too_long(used: int = 208_310, limit: int = 200_000) -> dict[str, Any]:
    """The 400 body Anthropic sends when the prompt exceeds the context window."""
    return anthropic_error(f"prompt is too long: {used} tokens > {limit} maximum")
