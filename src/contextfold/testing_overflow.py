"""Overflow fakes of :mod:`contextfold.testing`: provider context-overflow exceptions
(:func:`overflow_error`), a fake agent model that overflows above a token limit
(:class:`OverflowingModel`) and the token estimate they use (:func:`message_tokens`)."""

from __future__ import annotations

import copy
import importlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .core.tokens import count_messages, get_counter
from .core.wire import messages_from_openai
from .errors import ConfigError, InvalidMessageError
from .extras import needs_extra
from .providers.llm import ChatResult


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        out = []
        for block in content:
            if isinstance(block, Mapping):
                text = block.get("text")
                out.append(text if isinstance(text, str) else json.dumps(block, default=str))
        return "\n".join(out)
    return str(content)


def message_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Estimated tokens of OpenAI-format messages with the default counter
    (:func:`contextfold.core.tokens.count_messages`, framing included)."""
    counter = get_counter()
    items = list(messages)
    try:
        return count_messages(counter, messages_from_openai(items))
    except InvalidMessageError:  # malformed input still gets a rough count
        return sum(4 + counter.count_text(_text_of(m.get("content"))) for m in items)


# --------------------------------------------------------------------------- overflow errors

OVERFLOW_PROVIDERS: tuple[str, ...] = (
    "openai",
    "anthropic",
    "litellm",
    "vllm",
    "ollama",
    "llamacpp",
)

_DEFAULT_MESSAGES = {
    "openai": (
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130000 tokens. Please reduce the length of the messages."
    ),
    "anthropic": "prompt is too long: 208310 tokens > 200000 maximum",
    "litellm": (
        "litellm.ContextWindowExceededError: litellm.BadRequestError: "
        "ContextWindowExceededError: OpenAIException - This model's maximum context length is "
        "128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the "
        "length of the messages."
    ),
    "vllm": (
        "This model's maximum context length is 32768 tokens. However, you requested 40000 "
        "tokens (39000 in the messages, 1000 in the completion). Please reduce the length of "
        "the messages or completion."
    ),
    "ollama": "the input length exceeds the context length",
    "llamacpp": "the request exceeds the available context size, try increasing it",
}


def _sdk_http(sdk_name: str) -> tuple[Any, Any]:
    """(sdk module, the httpx flavour the SDK's exceptions are typed with)."""
    try:
        sdk = importlib.import_module(sdk_name)
        sdk_exceptions = importlib.import_module(f"{sdk_name}._exceptions")
    except ImportError as exc:
        raise ConfigError(
            needs_extra(
                f"overflow_error({sdk_name!r}) (it builds the real SDK exception)", sdk_name
            )
        ) from exc
    http = getattr(sdk_exceptions, "httpx2", None) or getattr(sdk_exceptions, "httpx", None)
    if http is None:
        raise ConfigError(f"overflow_error: cannot find the HTTP library of the {sdk_name} SDK")
    return sdk, http


def _sdk_status_error(
    sdk_name: str, url: str, status: int, body: dict[str, object], headers: Mapping[str, str]
) -> Exception:
    sdk, http = _sdk_http(sdk_name)
    request = http.Request("POST", url)
    response = http.Response(status, request=request, json=body, headers=dict(headers))
    message = f"Error code: {status} - {body}"
    if sdk_name == "openai":
        # The OpenAI client hands the exception the inner "error" object (see _make_status_error).
        inner = body.get("error", body)
        return sdk.BadRequestError(message, response=response, body=inner)  # type: ignore[no-any-return]
    return sdk.BadRequestError(message, response=response, body=body)  # type: ignore[no-any-return]


class _LiteLLMBadRequestError(Exception):
    """Shaped like ``litellm.exceptions.BadRequestError`` (status_code, message, model ...)."""

    def __init__(self, message: str, model: str, llm_provider: str) -> None:
        super().__init__(message)
        self.status_code = 400
        self.message = message
        self.model = model
        self.llm_provider = llm_provider


class _LiteLLMContextWindowExceededError(_LiteLLMBadRequestError):
    pass


_LiteLLMContextWindowExceededError.__name__ = "ContextWindowExceededError"
_LiteLLMContextWindowExceededError.__qualname__ = "ContextWindowExceededError"
_LiteLLMBadRequestError.__name__ = "BadRequestError"
_LiteLLMBadRequestError.__qualname__ = "BadRequestError"


class OllamaResponseError(Exception):
    """Shaped like ``ollama.ResponseError``: ``error`` text and ``status_code``."""

    def __init__(self, error: str, status_code: int = 400) -> None:
        super().__init__(error)
        self.error = error
        self.status_code = status_code

    def __str__(self) -> str:
        return f"{self.error} (status code: {self.status_code})"


OllamaResponseError.__name__ = "ResponseError"
OllamaResponseError.__qualname__ = "ResponseError"


def overflow_error(provider: str = "openai", message: str | None = None) -> Exception:
    """A context-overflow exception exactly as ``provider``'s client raises it.

    * ``openai``: ``openai.BadRequestError`` (code ``context_length_exceeded``), 400 response.
    * ``anthropic``: ``anthropic.BadRequestError``, ``invalid_request_error`` "prompt is too long".
    * ``litellm``: an exception whose class is named ``ContextWindowExceededError``.
    * ``vllm`` / ``llamacpp``: ``openai.BadRequestError`` with the body those servers return
      (reached through the OpenAI SDK with ``base_url``).
    * ``ollama``: an ``ollama.ResponseError`` look-alike.

    ``message`` replaces the provider's default error text.
    """
    if provider not in _DEFAULT_MESSAGES:
        raise ConfigError(
            f"overflow_error: unknown provider {provider!r}; use one of {OVERFLOW_PROVIDERS}"
        )
    text = message if message is not None else _DEFAULT_MESSAGES[provider]
    if provider == "openai":
        return _sdk_status_error(
            "openai",
            "https://api.openai.com/v1/chat/completions",
            400,
            {
                "error": {
                    "message": text,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            {"x-request-id": "req_contextfold_test"},
        )
    if provider == "anthropic":
        return _sdk_status_error(
            "anthropic",
            "https://api.anthropic.com/v1/messages",
            400,
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": text},
                "request_id": "req_contextfold_test",
            },
            {"request-id": "req_contextfold_test"},
        )
    if provider == "vllm":
        return _sdk_status_error(
            "openai",
            "http://localhost:8000/v1/chat/completions",
            400,
            {"error": {"message": text, "type": "BadRequestError", "param": None, "code": 400}},
            {},
        )
    if provider == "llamacpp":
        return _sdk_status_error(
            "openai",
            "http://localhost:8080/v1/chat/completions",
            400,
            {
                "error": {
                    "code": 400,
                    "message": text,
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 40000,
                    "n_ctx": 32768,
                }
            },
            {},
        )
    if provider == "litellm":
        return _LiteLLMContextWindowExceededError(text, model="gpt-4o", llm_provider="openai")
    return OllamaResponseError(text, 400)


class OverflowingModel:
    """A fake agent model: ``model(messages) -> assistant message dict``.

    Raises :func:`overflow_error(provider) <overflow_error>` when the estimated tokens of the
    messages (:func:`message_tokens`) exceed ``limit``, or on every call with ``always=True``.
    ``reply`` is the assistant text (or a callable ``messages -> str``). Records ``calls``
    (deep copies), ``token_counts`` and ``overflows``. Also a :class:`ChatModel` via
    :meth:`complete`.
    """

    def __init__(
        self,
        limit: int | None = None,
        *,
        provider: str = "openai",
        always: bool = False,
        reply: str | Callable[[list[dict[str, object]]], str] = "ok",
    ) -> None:
        if limit is None and not always:
            raise ConfigError("OverflowingModel needs a token limit or always=True")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"OverflowingModel: limit must be an int >= 1, got {limit!r}")
        if provider not in OVERFLOW_PROVIDERS:
            raise ConfigError(
                f"OverflowingModel: unknown provider {provider!r}; use one of {OVERFLOW_PROVIDERS}"
            )
        self.limit = limit
        self.provider = provider
        self.always = always
        self.reply = reply
        self.calls: list[list[dict[str, object]]] = []
        self.token_counts: list[int] = []
        self.overflows = 0
        self._lock = threading.Lock()

    def _check(self, messages: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
        recorded = [copy.deepcopy(dict(m)) for m in messages]
        tokens = message_tokens(recorded)
        with self._lock:
            self.calls.append(recorded)
            self.token_counts.append(tokens)
        if self.always or (self.limit is not None and tokens > self.limit):
            with self._lock:
                self.overflows += 1
            limit = self.limit or 0
            raise overflow_error(self.provider, _overflow_text(self.provider, limit, tokens))
        return recorded

    def _reply(self, recorded: list[dict[str, object]]) -> str:
        return self.reply(copy.deepcopy(recorded)) if callable(self.reply) else self.reply

    def __call__(self, messages: Sequence[Mapping[str, object]]) -> dict[str, object]:
        recorded = self._check(messages)
        return {"role": "assistant", "content": self._reply(recorded)}

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        recorded = self._check(messages)
        text = self._reply(recorded)
        return ChatResult(
            text=text,
            input_tokens=self.token_counts[-1],
            output_tokens=get_counter().count_text(text),
            model=f"overflowing-{self.provider}",
            stop_reason="stop",
        )


def _overflow_text(provider: str, limit: int, tokens: int) -> str | None:
    if provider in ("openai", "litellm"):
        prefix = (
            "litellm.ContextWindowExceededError: litellm.BadRequestError: OpenAIException - "
            if provider == "litellm"
            else ""
        )
        return (
            f"{prefix}This model's maximum context length is {limit} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
        )
    if provider == "anthropic":
        return f"prompt is too long: {tokens} tokens > {limit} maximum"
    if provider == "vllm":
        return (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{tokens} tokens ({tokens} in the messages, 0 in the completion). Please reduce "
            "the length of the messages or completion."
        )
    return None
