"""``summarizer = "upstream"``: the upstream model writes the compaction summaries.

Compaction runs inside ``prepare`` in a worker thread, so the model is called synchronously
there, through the same upstream, with the credentials and model of the request being served
(the session's newest request; requests of one session are serialized).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..compaction.summarizers.llm import LLMSummarizer
from ..errors import SummarizerError
from ..providers.llm import ChatResult
from .upstream import forward_headers


@dataclass
class RequestContext:
    """What the summary call borrows from the request being served."""

    provider: str = "openai"
    model: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class UpstreamChatModel:
    """A :class:`~contextfold.providers.llm.ChatModel` over the gateway's upstream."""

    def __init__(
        self, url_for: Callable[[str], str], context: RequestContext, timeout: float
    ) -> None:
        self._url_for = url_for
        self.context = context
        self._client = httpx.Client(timeout=timeout, trust_env=False)

    def __repr__(self) -> str:
        return f"UpstreamChatModel(model={self.context.model!r})"

    def complete(
        self, messages: Sequence[Mapping[str, object]], *, max_tokens: int | None = None
    ) -> ChatResult:
        ctx = self.context
        headers = forward_headers(ctx.headers, drop_authorization=False)
        headers["content-type"] = "application/json"
        headers.pop("accept", None)
        limit = max_tokens or 2_000
        if ctx.provider == "gemini":
            return self._gemini(messages, headers, limit)
        if ctx.provider == "anthropic":
            system = "\n\n".join(
                str(m.get("content")) for m in messages if m.get("role") == "system"
            )
            body: dict[str, Any] = {
                "model": ctx.model,
                "max_tokens": limit,
                "messages": [
                    {"role": m.get("role"), "content": m.get("content")}
                    for m in messages
                    if m.get("role") != "system"
                ],
            }
            if system:
                body["system"] = system
            path = "/v1/messages"
        else:
            body = {
                "model": ctx.model,
                "max_tokens": limit,
                "messages": [dict(m) for m in messages],
            }
            path = "/v1/chat/completions"
        try:
            resp = self._client.post(self._url_for(path), content=json.dumps(body), headers=headers)
        except httpx.HTTPError as exc:
            raise SummarizerError(
                f"the upstream summary call failed: {type(exc).__name__}"
            ) from exc
        if resp.status_code >= 400:
            raise SummarizerError(f"the upstream summary call failed with HTTP {resp.status_code}")
        try:
            data = resp.json()
            if ctx.provider == "anthropic":
                text = "".join(
                    b.get("text", "") for b in data["content"] if b.get("type") == "text"
                )
                usage = data.get("usage") or {}
                return ChatResult(
                    text=text,
                    input_tokens=usage.get("input_tokens"),
                    output_tokens=usage.get("output_tokens"),
                    model=data.get("model"),
                    stop_reason=data.get("stop_reason"),
                )
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            return ChatResult(
                text=choice["message"].get("content") or "",
                input_tokens=usage.get("prompt_tokens"),
                output_tokens=usage.get("completion_tokens"),
                model=data.get("model"),
                stop_reason=choice.get("finish_reason"),
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise SummarizerError("the upstream summary answer could not be read") from exc

    def _gemini(
        self, messages: Sequence[Mapping[str, Any]], headers: dict[str, str], limit: int
    ) -> ChatResult:
        """The summary from ``generateContent`` (the request's key header goes along)."""
        system = "\n\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        body: dict[str, Any] = {
            "contents": [
                {
                    "role": "model" if m.get("role") == "assistant" else "user",
                    "parts": [{"text": str(m.get("content") or "")}],
                }
                for m in messages
                if m.get("role") != "system"
            ],
            "generationConfig": {"maxOutputTokens": limit},
        }
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        path = f"/v1beta/models/{self.context.model}:generateContent"
        try:
            resp = self._client.post(self._url_for(path), content=json.dumps(body), headers=headers)
        except httpx.HTTPError as exc:
            raise SummarizerError(
                f"the upstream summary call failed: {type(exc).__name__}"
            ) from exc
        if resp.status_code >= 400:
            raise SummarizerError(f"the upstream summary call failed with HTTP {resp.status_code}")
        try:
            data = resp.json()
            cand = data["candidates"][0]
            parts = cand["content"].get("parts") or []
            usage = data.get("usageMetadata") or {}
            return ChatResult(
                text="".join(str(p.get("text", "")) for p in parts if not p.get("thought")),
                input_tokens=usage.get("promptTokenCount"),
                output_tokens=usage.get("candidatesTokenCount"),
                model=data.get("modelVersion"),
                stop_reason=cand.get("finishReason"),
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise SummarizerError("the upstream summary answer could not be read") from exc


def upstream_summarizer(model: UpstreamChatModel, window: int) -> LLMSummarizer:
    return LLMSummarizer(
        model,
        context_window=max(window, 4_096),
        max_summary_tokens=max(256, min(2_000, window // 16)),
    )


__all__ = ["RequestContext", "UpstreamChatModel", "upstream_summarizer"]
