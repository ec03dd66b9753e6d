"""The full history and the view derived from it.

:class:`HistoryView` holds the append-only history and the few facts that define the view:
the boundary (history before it is represented by one compaction message), per-message view
forms (offload placeholders, unanswered tool calls stripped) and the pinned messages (system
prompt, first and newest user message). Token counts are kept as prefix sums, so asking "how
big is the view" after appending costs O(new messages), not O(history).

Tool results must follow their assistant message (only other tool results in between), which
makes every non-tool position a legal cut point: a cut there never separates a call from its
result. This is computed once, here, and every strategy cuts only at :meth:`legal_cut_at_or_before`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import replace
from typing import TypeVar

from ..errors import InvalidMessageError
from ..jsontypes import JSONObject
from .messages import Message, check_message
from .scaffolding import is_pinned_state, is_scaffolding
from .view_cuts import CutPoints
from .view_reopen import CountFn, LazyReopen, LazySlots
from .wire import to_openai

_T = TypeVar("_T")  # what the view is made of: messages or their dicts


class HistoryView(CutPoints, LazyReopen):
    def __init__(self, count: CountFn) -> None:
        self._count = count
        self.history: list[Message] = []
        self.forms: list[Message] = []
        self._tokens: list[int] = []
        self._sums: list[int] = [0]
        #: the first position of ``_sums`` a changed form left stale (None: all current)
        self._stale_from: int | None = None
        #: OpenAI dicts of the forms, made on first use (None: not made yet); a reopened
        #: session never converts the messages before its boundary
        self._dicts: list[JSONObject | None] = []
        self.prefix_len = 0
        self.first_user: int | None = None
        self.newest_user: int | None = None
        self.boundary = 0
        self.compaction: Message | None = None
        self._compaction_tokens = 0
        self._compaction_dict: JSONObject | None = None
        #: tool call id -> index of its assistant message, for the group still collecting results
        self._open_calls: dict[str, int] = {}
        self._answered: dict[int, set[str]] = {}
        self._call_index: dict[str, int] = {}
        self.uuids: dict[str, int] = {}
        #: system/developer messages after the leading ones: instructions, kept verbatim
        self.later_system: list[int] = []
        #: the tool call id of each tool result (None for other messages), by position
        self.tool_ids: list[str | None] = []
        #: tool call id -> position of its result
        self._results: dict[str, int] = {}
        #: loads the messages a reopened session left unloaded (see :meth:`adopt`)
        self._loader: Callable[[list[int]], dict[int, Message]] | None = None
        self._after_fill: Callable[[], None] | None = None
        self._lazy_tokens: dict[int, int] = {}
        #: the role of each history message, by position
        self.roles: list[str] = []
        #: positions the caller's own rewrite took out of its conversation (a client that
        #: summarized, moved or refreshed messages, see :meth:`retract`): kept in the history,
        #: never in the view
        self.retracted: set[int] = set()
        #: user positions that are client scaffolding (few-shot examples, files block): never
        #: taken for the task while a real request exists
        self.scaffold: set[int] = set()
        #: positions of messages carrying the client's current state (its files block, its
        #: repository map, see :func:`contextfold.core.scaffolding.is_pinned_state`): pinned
        self.state_pins: list[int] = []

    #: at most this many state messages are pinned (the newest)
    MAX_STATE_PINS = 6

    def _classify(self, n: int, msg: Message) -> None:
        """Note whether history[n] is scaffolding (a user message, while the task is not
        known yet) or carries the client's current state."""
        if msg.role not in ("user", "assistant") or msg.tool_calls:
            return
        text = msg.text
        if is_pinned_state(text):
            self.state_pins.append(n)
            if msg.role == "user":
                self.scaffold.add(n)
            return
        undecided = self.first_user is None or self.first_user in self.scaffold
        if msg.role == "user" and undecided and is_scaffolding(text):
            self.scaffold.add(n)

    def fresh(self) -> HistoryView:
        """An empty view with the same token counter."""
        return HistoryView(self._count)

    # ------------------------------------------------------------------ building
    def __len__(self) -> int:
        return len(self.history)

    def check_batch(self, msgs: Sequence[Message], start: int) -> None:
        """Validate appending ``msgs`` without changing anything (all or nothing)."""
        open_calls = dict(self._open_calls)
        new_calls: set[str] = set()
        new_uuids: set[str] = set()
        for offset, msg in enumerate(msgs):
            self._check(msg, start + offset, open_calls, new_calls, new_uuids)

    def _check(
        self,
        msg: Message,
        where: int,
        open_calls: dict[str, int],
        new_calls: set[str],
        new_uuids: set[str],
        checked: bool = False,
    ) -> None:
        """Pairing rules; mutates only the scratch structures passed in."""
        if not checked:
            check_message(msg, where)
        if msg.uuid in self.uuids or msg.uuid in new_uuids:
            raise InvalidMessageError(f"message uuid {msg.uuid!r} already in history", index=where)
        new_uuids.add(msg.uuid)
        seen_calls = new_calls
        if msg.role == "tool":
            call_id = msg.tool_call_id or ""
            if call_id not in open_calls:
                if call_id in seen_calls or call_id in self._call_index:
                    problem = (
                        f"tool result for call {call_id!r} arrives after the conversation "
                        "moved on (or was already answered)"
                    )
                else:
                    problem = f"tool result for call {call_id!r} whose call never appeared"
                raise InvalidMessageError(problem, index=where)
            del open_calls[call_id]
            return
        open_calls.clear()
        for call in msg.tool_calls:
            if call.id in seen_calls or call.id in self._call_index:
                raise InvalidMessageError(f"tool call id {call.id!r} reused", index=where)
            seen_calls.add(call.id)
            open_calls[call.id] = where

    def append(self, msg: Message, index: int | None = None, *, checked: bool = False) -> None:
        """Append one message, enforcing tool pairing. Raises InvalidMessageError.
        ``checked``: ``msg`` was just validated (decoding a stored one does), not again."""
        n = len(self.history)
        where = n if index is None else index
        self._check(msg, where, dict(self._open_calls), set(), set(), checked)
        if msg.role != "tool":
            self._open_calls = {call.id: n for call in msg.tool_calls}
        # commit
        self.history.append(msg)
        self.roles.append(msg.role)
        self.uuids[msg.uuid] = n
        self.tool_ids.append(msg.tool_call_id if msg.role == "tool" else None)
        if msg.role == "tool":
            call_id = msg.tool_call_id or ""
            self._results[call_id] = n
            owner = self._open_calls.pop(call_id)
            self._answered.setdefault(owner, set()).add(call_id)
            self._push_form(msg)
            self._refresh_assistant(owner)
            return
        for call in msg.tool_calls:
            self._call_index[call.id] = n
        if msg.role in ("system", "developer"):
            if self.prefix_len == n:
                self.prefix_len = n + 1
                if self.boundary == n:
                    self.boundary = n + 1
            else:
                self.later_system.append(n)
        self._classify(n, msg)
        if msg.role == "user":
            if self.first_user is None or (
                self.first_user in self.scaffold and n not in self.scaffold
            ):
                self.first_user = n
            self.newest_user = n
        self._push_form(self._assistant_form(msg, n) if msg.tool_calls else msg)

    @property
    def _cum(self) -> list[int]:
        """Prefix sums of the forms' tokens (``_cum[i]``: the tokens before position ``i``).
        A changed form only marks the sums after it stale; they are brought up to date here,
        when next read, in one pass: a compaction that rewrites many forms (a batch of
        offloads, a reload) pays for one pass, not one per form."""
        start = self._stale_from
        if start is not None:
            sums = self._sums
            rest = itertools.accumulate(self._tokens[start - 1 :], initial=sums[start - 1])
            next(rest)
            sums[start:] = rest
            self._stale_from = None
        return self._sums

    @_cum.setter
    def _cum(self, sums: list[int]) -> None:
        self._sums = sums
        self._stale_from = None

    def _changed(self, index: int, delta: int) -> None:
        """The form at ``index`` now counts ``delta`` tokens more: the sums after it are
        stale."""
        if delta:
            start = index + 1
            if self._stale_from is None or start < self._stale_from:
                self._stale_from = start

    def expect_answers(self, index: int, call_ids: set[str]) -> None:
        """Reloading a stored log: the calls of message ``index`` are answered later in the
        same batch, so its view form is final at once (no provisional form to count)."""
        self._answered[index] = set(call_ids)

    def _push_form(self, form: Message) -> None:
        tokens = self._count(form)
        self.forms.append(form)
        self._tokens.append(tokens)
        if self._stale_from is None:
            self._sums.append(self._sums[-1] + tokens)
        else:  # made current with the rest when next read
            self._sums.append(0)
        self._dicts.append(None)

    def _assistant_form(self, msg: Message, index: int) -> Message:
        answered = self._answered.get(index, set())
        if len(answered) == len(msg.tool_calls):
            return msg
        kept = tuple(c for c in msg.tool_calls if c.id in answered)
        content = msg.content
        if not kept and not msg.text.strip():
            # an assistant turn that was only tool calls: an empty one is rejected by providers
            content = "(tool call without a result omitted)"
        return replace(msg, tool_calls=kept, content=content)

    def _refresh_assistant(self, index: int) -> None:
        current = self.forms[index]
        base = self.history[index]
        if current.metadata.get("cf_replaced"):
            return
        form = self._assistant_form(base, index)
        if form is not current:
            self.set_form(index, form)

    # ------------------------------------------------------------------ forms
    def set_form(self, index: int, form: Message) -> None:
        """Replace the view form of one history message (the history itself never changes)."""
        self.forms[index] = form
        old = self._tokens[index]
        new = 0 if index in self.retracted else self._count(form)
        self._tokens[index] = new
        self._dicts[index] = None
        self._changed(index, new - old)

    # ------------------------------------------------------------------ rewrites
    def check_retract(self, positions: Sequence[int]) -> list[int]:
        """The positions of ``positions`` not retracted yet, sorted; InvalidMessageError for
        one that is not a history position (nothing is changed)."""
        n = len(self.history)
        out: set[int] = set()
        for p in positions:
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n:
                raise InvalidMessageError(f"cannot retract {p!r}: not a history position")
            if p not in self.retracted:
                out.add(p)
        return sorted(out)

    def retract(self, positions: Sequence[int]) -> None:
        """Take history messages out of the view for good: the caller's conversation no
        longer has them (it dropped, summarized or replaced them itself). They stay in the
        history (recoverable, searchable); they count no tokens, are never shown or pinned,
        and their tool call ids may be used again by later messages."""
        todo = self.check_retract(positions)
        if not todo:
            return
        for i in todo:
            self.retracted.add(i)
            if not self._tokens[i]:
                continue
            if self.is_loaded(i):
                self.set_form(i, self.forms[i])
            else:
                self._zero(i)
        gone = set(todo)
        for cid in [c for c, i in self._call_index.items() if i in gone]:
            del self._call_index[cid]
        for cid in [c for c, i in self._results.items() if i in gone]:
            del self._results[cid]
        self._open_calls = {c: i for c, i in self._open_calls.items() if i not in gone}
        self.later_system = [i for i in self.later_system if i not in gone]
        self.state_pins = [i for i in self.state_pins if i not in gone]
        self._pick_users()

    def _zero(self, index: int) -> None:
        """Count a not yet loaded (retracted) message as 0 tokens."""
        delta = -self._tokens[index]
        self._tokens[index] = 0
        self._changed(index, delta)

    def _pick_users(self) -> None:
        users = [i for i, r in enumerate(self.roles) if r == "user" and i not in self.retracted]
        real = [i for i in users if i not in self.scaffold]
        self.first_user = real[0] if real else users[0] if users else None
        self.newest_user = users[-1] if users else None

    def visible(self, start: int, end: int) -> list[int]:
        """Positions in [start, end) that are not retracted."""
        r = self.retracted
        return [i for i in range(start, end) if i not in r]

    def tokens_of(self, index: int) -> int:
        return self._tokens[index]

    def range_tokens(self, start: int, end: int) -> int:
        return self._cum[end] - self._cum[start]

    # ------------------------------------------------------------------ pinned
    def pinned_before(self, boundary: int) -> list[int]:
        """Pinned history indices that a boundary at ``boundary`` would otherwise hide."""
        out: list[int] = []
        if self.first_user is not None and self.prefix_len <= self.first_user < boundary:
            out.append(self.first_user)
        later = {i for i in self.later_system[-5:] if i < boundary}  # the newest five
        nu = self.newest_user
        if nu is not None and self.prefix_len <= nu < boundary and nu != self.first_user:
            later.add(nu)
        for i in self.state_pins[-self.MAX_STATE_PINS :]:
            if self.prefix_len <= i < boundary and i != self.first_user:
                later.add(i)
        out.extend(sorted(later))
        return out

    # ------------------------------------------------------------------ boundary
    def set_boundary(self, boundary: int, compaction: Message | None) -> None:
        if not self.is_legal_cut(boundary) and boundary != self.prefix_len:
            raise InvalidMessageError(f"internal: {boundary} is not a legal cut point")
        self.boundary = boundary
        self.compaction = compaction
        self._compaction_tokens = self._count(compaction) if compaction is not None else 0
        self._compaction_dict = to_openai(compaction) if compaction is not None else None

    # ------------------------------------------------------------------ the view
    def view_tokens(
        self, boundary: int | None = None, *, compaction_tokens: int | None = None
    ) -> int:
        b = self.boundary if boundary is None else boundary
        total = self._cum[self.prefix_len] + self._cum[len(self.history)] - self._cum[b]
        for i in self.pinned_before(b):
            total += self._tokens[i]
        if b > self.prefix_len:
            total += self._compaction_tokens if compaction_tokens is None else compaction_tokens
        return total

    def view_messages(self) -> list[Message]:
        if self.retracted:
            return self._visible_view(self.forms.__getitem__, self.compaction)
        b = self.boundary
        out = self.forms[: self.prefix_len]
        pinned = self.pinned_before(b)
        if self.first_user in pinned:
            out.append(self.forms[self.first_user])  # type: ignore[index]
        if self.compaction is not None and b > self.prefix_len:
            out.append(self.compaction)
        for i in pinned:
            if i != self.first_user:
                out.append(self.forms[i])
        out.extend(self.forms[b:])
        return out

    def _dict(self, index: int) -> JSONObject:
        d = self._dicts[index]
        if d is None:
            d = self._dicts[index] = to_openai(self.forms[index])
        return d

    def view_dicts(self, *, copy: bool = False) -> list[JSONObject]:
        """The view as OpenAI dicts. The dicts are cached per message and shared between calls
        (building the list is O(view) pointer copies); pass ``copy=True`` for private copies."""
        b = self.boundary
        get = self._dict
        if self.retracted:
            out = self._visible_view(get, self._compaction_dict)
            return deepcopy(out) if copy else out
        out = [get(i) for i in range(self.prefix_len)]
        pinned = self.pinned_before(b)
        if self.first_user is not None and self.first_user in pinned:
            out.append(get(self.first_user))
        if self._compaction_dict is not None and b > self.prefix_len:
            out.append(self._compaction_dict)
        for i in pinned:
            if i != self.first_user:
                out.append(get(i))
        out.extend([d if d is not None else get(b + j) for j, d in enumerate(self._dicts[b:])])
        if copy:
            return deepcopy(out)
        return out

    def _visible_view(self, get: Callable[[int], _T], compaction: _T | None) -> list[_T]:
        """The view (see :meth:`view_messages`) without the retracted messages."""
        b = self.boundary
        r = self.retracted
        out = [get(i) for i in range(self.prefix_len) if i not in r]
        pinned = [i for i in self.pinned_before(b) if i not in r]
        if self.first_user is not None and self.first_user in pinned:
            out.append(get(self.first_user))
        if compaction is not None and b > self.prefix_len:
            out.append(compaction)
        out.extend(get(i) for i in pinned if i != self.first_user)
        out.extend(get(i) for i in range(b, len(self.history)) if i not in r)
        return out

    def messages_between(self, start: int, end: int) -> Sequence[Message]:
        """View forms of history[start:end] (what a summarizer should see), retracted
        messages left out."""
        if self.retracted:
            return [self.forms[i] for i in self.visible(start, end)]
        return self.forms[start:end]


__all__ = ["CountFn", "HistoryView", "LazySlots"]
