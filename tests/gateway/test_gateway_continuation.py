"""A conversation the client compacted itself is recognized by the summary it starts with."""

from __future__ import annotations

from contextfold.core.messages import Message
from contextfold.gateway.continuation import Continuations
from contextfold.gateway.convert import parse_anthropic

SUMMARY = [
    "1. Primary Request and Intent: fix the off-by-one in app.py and run the build steps.",
    "2. Key Technical Concepts: a noisy build step that prints a long log per run.",
    "3. Files and Code Sections: app.py, where total() returned one too many.",
    "4. Pending Tasks: none; every requested build step has run and was reported.",
]
ANSWER = Message(
    role="assistant",
    content="<analysis>\nshort\n</analysis>\n<summary>\n" + "\n".join(SUMMARY) + "\n</summary>",
)


def continued(first: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": first}, {"role": "user", "content": "and now?"}]


def test_the_summary_rewrapped_by_the_client_continues_the_old_conversation() -> None:
    index = Continuations()
    index.remember("gw-old", "alice", ANSWER)
    text = "This session is being continued.\n\nSummary:\n" + "\n".join(SUMMARY) + "\n\nGo on."
    conv = parse_anthropic(continued(text), "You are a coding agent.")
    assert index.resolve("gw-new", "alice", conv) == "gw-old"
    assert index.resolve("gw-new", "alice", conv) == "gw-old"  # remembered
    # another credential's conversation never continues this one
    assert index.resolve("gw-other", "bob", conv) == "gw-other"


def test_a_few_shared_lines_or_a_short_answer_are_not_a_continuation() -> None:
    index = Continuations()
    index.remember("gw-old", "alice", ANSWER)
    index.remember("gw-short", "alice", Message(role="assistant", content="All done, thanks!"))
    one_line = parse_anthropic(continued(SUMMARY[0] + "\nsomething else entirely"), None)
    assert index.resolve("gw-a", "alice", one_line) == "gw-a"
    short = parse_anthropic(continued("All done, thanks!"), None)
    assert index.resolve("gw-b", "alice", short) == "gw-b"
    # the conversation that relayed the answer is not its own continuation
    same = parse_anthropic(continued("\n".join(SUMMARY)), None)
    assert index.resolve("gw-old", "alice", same) == "gw-old"
