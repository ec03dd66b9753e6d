"""The configuration docs' ``LLMSummarizer(ChatOpenAI(...))`` runs with what the ``langchain``
extra installs (langchain-openai), against contextfold.testing's fake OpenAI server."""

from __future__ import annotations

from langchain_openai import ChatOpenAI

from contextfold.compaction.summarizers import LLMSummarizer
from contextfold.compaction.summarizers.base import SummaryRequest
from contextfold.core.messages import Message
from contextfold.testing import fake_openai_server

SUMMARY = "### User Intent\n- fix the date test\n## Summary\nran pytest"


def test_llm_summarizer_with_chat_openai() -> None:
    with fake_openai_server(replies=[SUMMARY]) as fake:
        model = ChatOpenAI(model="gpt-4.1", base_url=fake.base_url, api_key="t", max_retries=0)
        request = SummaryRequest(
            messages=[
                Message(role="user", content="Fix the failing test in tests/test_dates.py"),
                Message(role="assistant", content="I ran pytest: 1 failed."),
            ]
        )
        text = LLMSummarizer(model).summarize(request)
    assert "fix the date test" in text
    sent = fake.requests[0].body
    assert sent["model"] == "gpt-4.1" and "tests/test_dates.py" in str(sent["messages"])
