"""Ingest: messages appended to a session's history, and tool results offloaded on arrival."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from ..compaction.offload import offloadable_text
from ..core.messages import Message, check_encodable
from ..core.wire import from_anthropic
from ..errors import ContextFoldError
from ..providers.responses import parse_inputs, response_message
from ..recovery.deferred import DEFER_MIN
from .context import SessionContext

#: What ``add`` accepts: an OpenAI (or Anthropic-block) message dict, or a Message.
MessageInput = Mapping[str, object] | Message


def parse(ctx: SessionContext, messages: Iterable[MessageInput]) -> list[Message]:
    """``messages`` as neutral Messages appended after the history; a dict gets a uuid
    derived from (session, position)."""
    return parse_inputs(messages, len(ctx.view), ctx.uuid_for)


def from_response(ctx: SessionContext, response: object, choice: int) -> Message:
    """The assistant turn of a model's ``response`` as the next message of the history."""
    msg = response_message(response, choice=choice)
    return replace(msg, uuid=ctx.uuid_for(len(ctx.view)))


def from_anthropic_messages(
    ctx: SessionContext,
    messages: Mapping[str, object] | Sequence[Mapping[str, object]],
    system: str | Sequence[Mapping[str, object]] | None,
) -> list[Message]:
    """Anthropic Messages API messages (one or a list) as the next messages of the history."""
    items = [messages] if isinstance(messages, Mapping) else list(messages)
    converted = from_anthropic(items, system)
    start = len(ctx.view)
    return [replace(m, uuid=ctx.uuid_for(start + i)) for i, m in enumerate(converted)]


def check(ctx: SessionContext, parsed: list[Message]) -> list[int]:
    """Validate ``parsed`` as the next messages (all or nothing, before anything is written);
    their token counts."""
    start = len(ctx.view)
    for i, msg in enumerate(parsed):
        check_encodable(msg, start + i)
    ctx.view.check_batch(parsed, start)
    return [ctx.cache.count(m) for m in parsed]


def append(ctx: SessionContext, parsed: list[Message], tokens: list[int]) -> None:
    """Log and append checked messages (inside the caller's unit of work); each tool result
    goes through the offload policies as it arrives."""
    start = len(ctx.view)
    bulk = len(parsed) >= DEFER_MIN  # a long first request: its search rows after the answer
    first_event = ctx.session.next_seq
    entries = ctx.log.append(parsed, start, tokens, index=not bulk)
    if bulk:
        ctx.recovery.deferred.queue_rows(start, len(parsed), first_event, entries[0].ts)
    for i, ids in _answered_within(parsed).items():
        ctx.view.expect_answers(start + i, ids)  # final view form at once, counted once
    for i, msg in enumerate(parsed):
        ctx.view.append(msg, start + i, checked=True)
        if msg.role == "tool":
            offload_on_arrival(ctx, start + i)


def _answered_within(parsed: Sequence[Message]) -> dict[int, set[str]]:
    """The assistant messages of ``parsed`` whose tool calls are all answered by the results
    that follow them in ``parsed`` (index -> call ids)."""
    out: dict[int, set[str]] = {}
    owner: int | None = None
    got: set[str] = set()
    for i, msg in enumerate(parsed):
        if msg.role == "tool":
            if owner is not None and msg.tool_call_id:
                got.add(msg.tool_call_id)
            continue
        if owner is not None and len(got) == len(parsed[owner].tool_calls):
            out[owner] = got
        owner, got = (i, set()) if msg.tool_calls else (None, set())
    if owner is not None and len(got) == len(parsed[owner].tool_calls):
        out[owner] = got
    return out


def offload_on_arrival(ctx: SessionContext, index: int) -> None:
    """Offload a large tool result when it arrives (the eviction policy first, then ingest
    offload), leaving a placeholder in the view; the original becomes evidence at once."""
    msg = ctx.view.history[index]
    text = offloadable_text(msg.content)
    if text is None:
        return
    compactor = ctx.compactor
    tool_name = compactor._tool_name(index)
    for name, store in (("eviction", ctx.eviction_store), ("ingest", ctx.offload)):
        policy = compactor.policies.get(name)
        if policy is None or not policy.applies(text, tool_name):
            continue
        try:
            entry = store.write(
                msg.tool_call_id or "",
                text,
                message_uuid=msg.uuid,
                policy=name,
                tool_name=tool_name,
            )
        except ContextFoldError as exc:
            ctx.recovery.note_problem(f"{name} offload failed for {msg.tool_call_id}: {exc}")
            return
        compactor.apply_offload(index, entry, policy)
        ctx.recovery.index_ingest(index, entry)
        return


__all__ = [
    "MessageInput",
    "append",
    "check",
    "from_anthropic_messages",
    "from_response",
    "offload_on_arrival",
    "parse",
]
