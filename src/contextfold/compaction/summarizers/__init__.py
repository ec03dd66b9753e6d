"""Summarizers: the extractive default (no LLM) and LLM-backed ones.

``LLMSummarizer(model)`` accepts a :class:`contextfold.providers.llm.ChatModel` or any LangChain chat model
(``ChatOpenAI(...)``, ``ChatAnthropic(...)``, ...); ``OpenAICompatibleSummarizer`` and
``AnthropicSummarizer`` build the model from a model name. The SDKs are imported only when one of
them is constructed.
"""

from .base import Summarizer, SummaryRequest
from .extractive import ExtractiveSummarizer
from .llm import AnthropicSummarizer, LLMSummarizer, OpenAICompatibleSummarizer

__all__ = [
    "AnthropicSummarizer",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "OpenAICompatibleSummarizer",
    "Summarizer",
    "SummaryRequest",
]
