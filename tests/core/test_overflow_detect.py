"""is_context_overflow / overflow_kind: every provider's overflow error, and look-alikes that
are not overflows."""

from __future__ import annotations

import anthropic
import openai
import pytest

from contextfold.core.overflow import OVERFLOW_KINDS, is_context_overflow, overflow_kind
from contextfold.errors import ContextOverflowError, SummarizerError
from contextfold.testing import OVERFLOW_PROVIDERS, OllamaResponseError, overflow_error
from tests.support.http_fakes import (
    FakeLLMServer,
    anthropic_error,
    fake_llm_server_fixture,  # noqa: F401
    openai_context_length_error,
    openai_error,
    openai_rate_limit_error,
)


@pytest.mark.parametrize("provider", OVERFLOW_PROVIDERS)
def test_overflow_error_of_every_provider_is_recognized(provider: str) -> None:
    exc = overflow_error(provider)
    assert is_context_overflow(exc)
    assert overflow_kind(exc) == provider


def test_sdk_exception_classes_are_the_real_ones() -> None:
    assert type(overflow_error("openai")) is openai.BadRequestError
    assert type(overflow_error("vllm")) is openai.BadRequestError
    assert type(overflow_error("llamacpp")) is openai.BadRequestError
    exc = overflow_error("anthropic")
    assert type(exc) is anthropic.BadRequestError
    assert exc.status_code == 400 and exc.type == "invalid_request_error"


def test_litellm_is_recognized_by_class_name_alone() -> None:
    exc = overflow_error("litellm", message="something opaque")
    assert type(exc).__name__ == "ContextWindowExceededError"
    assert overflow_kind(exc) == "litellm"

    class ContextWindowExceededError(Exception):  # litellm's own class, as another module
        pass

    class Subclass(ContextWindowExceededError):
        pass

    assert overflow_kind(Subclass("x")) == "litellm"


def test_openai_code_alone_is_enough() -> None:
    exc = overflow_error("openai", message="Your input exceeds the context window of this model.")
    assert exc.code == "context_length_exceeded"  # type: ignore[attr-defined]
    assert overflow_kind(exc) == "openai"
    assert overflow_kind(overflow_error("openai", message="opaque")) == "openai"


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion).",
            "vllm",
        ),
        (
            "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
            "vllm",
        ),
        ("Input prompt (9000 tokens) is longer than the model's context length (8192)", "vllm"),
        (
            "The prompt (total length 40000) is too long to fit into the model (context length "
            "32768). Make sure that `max_model_len` is no smaller than the number of text tokens.",
            "vllm",
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
            "context length is 4096 tokens and your request has 3500 input tokens (1000 > 4096 "
            "- 3500).",
            "vllm",
        ),
        ("input length exceeds maximum context length", "ollama"),
        ("the input length exceeds the context length", "ollama"),
        ("context length exceeded", "ollama"),
        ("the request exceeds the available context size, try increasing it", "llamacpp"),
        ("exceed_context_size_error", "llamacpp"),
        ("prompt is too long: 208310 tokens > 200000 maximum", "anthropic"),
        (
            "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, "
            "decrease input length or `max_tokens` and try again",
            "anthropic",
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            "openai",
        ),
        ("Error: context_length_exceeded", "generic"),
        ("request exceeds maximum context window", "generic"),
        ("Token limit reached for this request", "generic"),
        ("Too many tokens in prompt", "generic"),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            "gemini",
        ),
        ("The request exceeds the maximum number of tokens allowed.", "generic"),
        ("Input is too long for requested model.", "generic"),
    ],
)
def test_messages_of_every_provider(message: str, kind: str) -> None:
    assert overflow_kind(RuntimeError(message)) == kind
    assert is_context_overflow(RuntimeError(message))


def test_wrapped_overflow_is_found_through_cause_and_context() -> None:
    inner = overflow_error("anthropic")
    try:
        try:
            raise inner
        except anthropic.BadRequestError as exc:
            raise SummarizerError("summarizing failed") from exc
    except SummarizerError as outer:
        assert overflow_kind(outer) == "anthropic"
    try:
        try:
            raise overflow_error("vllm")
        except openai.BadRequestError:
            raise ValueError("while handling") from None
    except ValueError as suppressed:
        assert not is_context_overflow(suppressed)  # `from None` hides the context
    try:
        try:
            raise overflow_error("llamacpp")
        except openai.BadRequestError:
            raise KeyError("during cleanup")  # noqa: B904
    except KeyError as implicit:
        assert overflow_kind(implicit) == "llamacpp"


def test_cycles_and_groups() -> None:
    a = RuntimeError("a")
    b = RuntimeError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert not is_context_overflow(a)

    class Group(Exception):
        def __init__(self, exceptions: list[BaseException]) -> None:
            super().__init__("several failures")
            self.exceptions = exceptions

    assert overflow_kind(Group([ValueError("x"), overflow_error("ollama")])) == "ollama"


def test_contextfold_own_overflow_error() -> None:
    assert overflow_kind(ContextOverflowError("still too long after recovery")) == "contextfold"
    assert set(OVERFLOW_PROVIDERS) <= set(OVERFLOW_KINDS)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("invalid literal for int()"),
        RuntimeError("connection reset by peer"),
        TimeoutError("timed out"),
        KeyError("maximum"),
        RuntimeError(
            "max_tokens is too large: 100000. This model supports at most 4096 completion tokens, whereas you provided 100000."
        ),
        RuntimeError(
            "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude"
        ),
        RuntimeError("Could not parse response content as the length limit was reached"),
        OllamaResponseError("model 'llama9' not found, try pulling it first", 404),
    ],
)
def test_unrelated_errors_are_not_overflows(exc: BaseException) -> None:
    assert not is_context_overflow(exc)
    assert overflow_kind(exc) is None


def _openai_client(server: FakeLLMServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=server.openai_base_url, max_retries=0)


def test_real_sdk_exception_from_the_local_server(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(400, openai_context_length_error())
    fake_llm_server.enqueue(
        400,
        {
            "object": "error",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
            "message": "This model's maximum context length is 32768 tokens. However, you "
            "requested 33000 tokens (32000 in the messages, 1000 in the completion).",
        },
    )
    client = _openai_client(fake_llm_server)
    kinds = []
    for _ in range(2):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        kinds.append(overflow_kind(info.value))
    assert kinds == ["openai", "vllm"]


def test_rate_limit_and_auth_errors_from_the_local_server_are_not_overflows(
    fake_llm_server: FakeLLMServer,
) -> None:
    # OpenAI's TPM rate limit mentions tokens and "Request too large"; still not an overflow.
    fake_llm_server.enqueue(429, openai_rate_limit_error())
    fake_llm_server.enqueue(
        429,
        openai_error(
            "Request too large for gpt-4o: Limit 30000, Requested 50000. The "
            "input or output tokens must be reduced (too many tokens).",
            type="tokens",
            code="rate_limit_exceeded",
        ),
    )
    fake_llm_server.enqueue(401, openai_error("Incorrect API key provided", code="invalid_api_key"))
    client = _openai_client(fake_llm_server)
    for expected in (openai.RateLimitError, openai.RateLimitError, openai.AuthenticationError):
        with pytest.raises(expected) as info:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert not is_context_overflow(info.value)


def test_anthropic_rate_limit_is_not_an_overflow(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue(
        429,
        anthropic_error(
            "This request would exceed the rate limit of 40,000 input tokens per "
            "minute (too many tokens)",
            type="rate_limit_error",
        ),
    )
    client = anthropic.Anthropic(
        api_key="k", base_url=fake_llm_server.anthropic_base_url, max_retries=0
    )
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert not is_context_overflow(info.value)
