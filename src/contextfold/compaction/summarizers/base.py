"""The Summarizer extension point."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from ...core.anchors import Anchor
from ...core.messages import Message

#: "anchors": five structured anchors + ## Summary.
#: "sections": SESSION INTENT / SUMMARY / ARTIFACTS / NEXT STEPS.
SummaryStyle = Literal["anchors", "sections"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryRequest:
    """What to summarize.

    ``messages`` is the range leaving the view, already prepared for summarizing (tool results
    may be offload placeholders; long write_file/edit_file arguments may be truncated).
    ``previous_summary``/``previous_anchors`` are set when an earlier compaction exists: the
    summarizer then merges (incremental template).
    """

    messages: Sequence[Message]
    previous_summary: str | None = None
    previous_anchors: Sequence[Anchor] = ()
    style: SummaryStyle = "anchors"
    #: A custom prompt template (must contain "{messages}"), for LLM summarizers.
    prompt: str | None = None
    #: Upper bound for the summary length, in tokens (a hint).
    max_summary_tokens: int = 2_000
    #: Extra context the summarizer may use (e.g. the todo list); never required.
    notes: Sequence[str] = field(default_factory=tuple)
    #: Messages of the range left out of ``messages`` (the middle of a very long range the
    #: extractive summary does not read); they are counted as compacted all the same.
    omitted: int = 0


@runtime_checkable
class Summarizer(Protocol):
    """Turns a range of messages into summary text.

    For style "anchors" the text must follow the anchors format (### sections + ## Summary);
    the caller parses it tolerantly, so broken output is survivable. Raise any exception to
    signal failure: the compactor fails open to the truncation fallback and records why.
    """

    def summarize(self, request: SummaryRequest) -> str: ...
