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

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from copy import deepcopy
from dataclasses import replace
from typing import Any

from .errors import InvalidMessageError, StorageError
from .messages import Message, check_message
from .scaffolding import is_pinned_state, is_scaffolding
from .wire import to_openai

CountFn = Callable[[Message], int]


class LazySlots(Sequence[Message]):
    """A list of messages some of which are loaded on first use (a reopened session's history
    before its compaction boundary). Touching a missing one loads them all at once
    (``fill``); until then no code path that builds the view needs them."""

    __slots__ = ("_fill", "_hi", "_lo", "items")

    def __init__(self, items: list[Message | None], lo: int, hi: int, fill: Callable[[], None]):
        self.items = items
        self._fill = fill
        self._lo, self._hi = lo, hi

    @property
    def complete(self) -> bool:
        return self._hi <= self._lo

    def filled(self) -> None:
        self._lo = self._hi = 0

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: Any) -> Any:
        got = self.items[index]
        if self._hi > self._lo and (
            got is None if not isinstance(index, slice) else any(m is None for m in got)
        ):
            self._fill()
            got = self.items[index]
        return got

    def __iter__(self) -> Iterator[Message]:
        if self._hi > self._lo:
            self._fill()
        return iter(self.items)  # type: ignore[arg-type]

    def append(self, msg: Message) -> None:
        self.items.append(msg)

    def __setitem__(self, index: int, msg: Message) -> None:
        self.items[index] = msg


class HistoryView:
    def __init__(self, count: CountFn) -> None:
        self._count = count
        self.history: list[Message] = []
        self.forms: list[Message] = []
        self._tokens: list[int] = []
        self._cum: list[int] = [0]
        #: OpenAI dicts of the forms, made on first use (None: not made yet); a reopened
        #: session never converts the messages before its boundary
        self._dicts: list[dict[str, Any] | None] = []
        self.prefix_len = 0
        self.first_user: int | None = None
        self.newest_user: int | None = None
        self.boundary = 0
        self.compaction: Message | None = None
        self._compaction_tokens = 0
        self._compaction_dict: dict[str, Any] | None = None
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
        #: repository map, see :func:`contextfold.scaffolding.is_pinned_state`): pinned
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

    _deferred = False
    _stale = False

    @contextlib.contextmanager
    def deferred_sums(self) -> Iterator[None]:
        """Many set_form calls at once (reloading a session): the prefix sums are rebuilt once
        at the end instead of after each call."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False
            if self._stale:
                self._stale = False
                self._cum[1:] = list(itertools.accumulate(self._tokens))

    def expect_answers(self, index: int, call_ids: set[str]) -> None:
        """Reloading a stored log: the calls of message ``index`` are answered later in the
        same batch, so its view form is final at once (no provisional form to count)."""
        self._answered[index] = set(call_ids)

    def _push_form(self, form: Message) -> None:
        tokens = self._count(form)
        self.forms.append(form)
        self._tokens.append(tokens)
        self._cum.append(self._cum[-1] + tokens)
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
        delta = new - old
        if delta and self._deferred:
            self._stale = True
        elif delta:
            cum = self._cum
            for j in range(index + 1, len(cum)):
                cum[j] += delta

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
        cum = self._cum
        for j in range(index + 1, len(cum)):
            cum[j] += delta

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

    # ------------------------------------------------------------------ cuts
    def is_legal_cut(self, index: int) -> bool:
        n = len(self.history)
        if index < self.prefix_len or index > n:
            return False
        if self._open_calls and min(self._open_calls.values()) < index:
            return False  # the results of that call are still to come: keep the call in view
        return index == n or self.history[index].role != "tool"

    def legal_cut_at_or_before(self, index: int, floor: int) -> int:
        """The largest legal cut in [floor, index]; ``floor`` if none."""
        i = min(index, len(self.history))
        while i > floor and not self.is_legal_cut(i):
            i -= 1
        return max(i, floor)

    def legal_cut_at_or_after(self, index: int) -> int:
        i = max(index, self.prefix_len)
        n = len(self.history)
        while i < n and not self.is_legal_cut(i):
            i += 1
        return i

    def tail_start(self, min_tail: int) -> int:
        """Start of the kept tail: at least ``min_tail`` messages, never splitting a tool pair."""
        n = len(self.history)
        return self.legal_cut_at_or_before(n - min_tail, self.boundary)

    def call_positions(self) -> dict[str, int]:
        """Every tool call id of the history -> its 0-based number in call order (ids are
        unique; a reopened view knows them from the heads, nothing is loaded)."""
        return {c: n for n, c in enumerate(self._call_index)}

    def call_owner(self, call_id: str) -> int | None:
        """History index of the assistant message that issued ``call_id``."""
        return self._call_index.get(call_id)

    def result_index(self, call_id: str) -> int | None:
        """History index of the result of ``call_id``."""
        return self._results.get(call_id)

    def tool_ids_between(self, start: int, end: int) -> list[str]:
        """Tool call ids of the results in history[start:end] (no message is loaded)."""
        return [t for t in self.tool_ids[start:end] if t]

    # ------------------------------------------------------------------ lazy reopen
    @property
    def complete(self) -> bool:
        """Every message is loaded (False after a lazy reopen until one before the boundary
        is used)."""
        h = self.history
        return not isinstance(h, LazySlots) or h.complete

    def is_loaded(self, index: int) -> bool:
        h = self.history
        return not isinstance(h, LazySlots) or h.items[index] is not None

    def adopt(
        self,
        heads: Sequence[tuple[str, str, str | None, tuple[str, ...], int]],
        loaded: dict[int, Message],
        loader: Callable[[list[int]], dict[int, Message]],
        after_fill: Callable[[], None],
        retracts: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        """Rebuild an empty view from stored message heads ``(uuid, role, tool_call_id,
        call ids, tokens)``: the messages in ``loaded`` are decoded, the others are loaded by
        ``loader(positions)`` the first time one is needed (then ``after_fill()`` runs). Tool
        pairing was checked when the messages were written; a head that breaks it raises
        InvalidMessageError (the caller then reads every message instead). ``retracts``: the
        stored rewrites, as message count when it was made -> the positions it retracted
        (applied in order, see :meth:`retract`)."""
        assert not self.history
        n = len(heads)
        items: list[Message | None] = [None] * n
        tokens = [0] * n
        open_calls: dict[str, int] = {}
        uuids: dict[str, int] = {}
        tool_ids: list[str | None] = []
        answered: dict[int, set[str]] = {}
        results: dict[str, int] = {}
        call_index: dict[str, int] = {}
        later_system: list[int] = []
        prefix_len, first_user, newest_user = 0, None, None
        gone: set[int] = set()
        for i, (uuid, role, call_id, call_ids, count) in enumerate(heads):
            if retracts and i in retracts:
                self._retract_heads(retracts[i], i, gone, open_calls, results, call_index)
                later_system = [j for j in later_system if j not in gone]
            if uuid in uuids:
                raise InvalidMessageError(f"message uuid {uuid!r} twice in stored heads", index=i)
            uuids[uuid] = i
            tool_ids.append(call_id if role == "tool" else None)
            msg = loaded.get(i)
            items[i] = msg
            tokens[i] = count
            if role == "tool":
                cid = call_id or ""
                owner = open_calls.pop(cid, None)
                if owner is None:
                    raise InvalidMessageError(f"stored result of call {cid!r} has no call", index=i)
                answered.setdefault(owner, set()).add(cid)
                results[cid] = i
                continue
            open_calls = {c: i for c in call_ids}
            for c in call_ids:
                if c in call_index:
                    raise InvalidMessageError(f"tool call id {c!r} twice in stored heads", index=i)
                call_index[c] = i
            if role in ("system", "developer"):
                if prefix_len == i:
                    prefix_len = i + 1
                else:
                    later_system.append(i)
            elif role == "user":
                if first_user is None:
                    first_user = i
                newest_user = i
        # checked: now the view takes it
        self.uuids, self.tool_ids, self._answered = uuids, tool_ids, answered
        self._results, self._call_index, self.later_system = results, call_index, later_system
        self.prefix_len = self.boundary = prefix_len
        self.first_user, self.newest_user = first_user, newest_user
        self._open_calls = open_calls
        self.roles = [h[1] for h in heads]
        for i in sorted(loaded):  # the messages not loaded are classified as they are read
            self._classify(i, loaded[i])
        self._adopt_retracts(retracts, gone)
        forms: list[Message | None] = [None] * n
        for i, msg in loaded.items():
            form = self._assistant_form(msg, i) if msg.tool_calls else msg
            forms[i] = form
            tokens[i] = self._count(form)
        for i in gone:
            tokens[i] = 0
        self._tokens = tokens
        self._cum = [0, *itertools.accumulate(tokens)]
        self._dicts = [None] * n
        missing = [i for i in range(n) if items[i] is None]
        lo, hi = (missing[0], missing[-1] + 1) if missing else (0, 0)
        self.history = LazySlots(items, lo, hi, self._fill)  # type: ignore[assignment]
        self.forms = LazySlots(forms, lo, hi, self._fill)  # type: ignore[assignment]
        self._loader, self._after_fill = loader, after_fill

    def _adopt_retracts(self, retracts: Mapping[int, Sequence[int]] | None, gone: set[int]) -> None:
        """The end of :meth:`adopt`: a rewrite that only retracted (made when the history had
        all its messages), then the retracted set and the pinned users without them."""
        n = len(self.roles)
        if retracts and n in retracts:
            self._retract_heads(
                retracts[n], n, gone, self._open_calls, self._results, self._call_index
            )
            self.later_system = [j for j in self.later_system if j not in gone]
        self.retracted = gone
        self.state_pins = [i for i in self.state_pins if i not in gone]
        if gone or self.scaffold:
            self._pick_users()

    @staticmethod
    def _retract_heads(
        positions: Sequence[int],
        at: int,
        gone: set[int],
        open_calls: dict[str, int],
        results: dict[str, int],
        call_index: dict[str, int],
    ) -> None:
        """Apply one stored rewrite while :meth:`adopt` reads the heads (at message ``at``)."""
        new = {p for p in positions if isinstance(p, int) and 0 <= p < at}
        if not new:
            return
        gone |= new
        for table in (open_calls, results, call_index):
            for cid in [c for c, j in table.items() if j in new]:
                del table[cid]

    def _fill(self) -> None:
        """Load every message a lazy reopen left out (the rare paths that need old ones)."""
        history, forms = self.history, self.forms
        if not isinstance(history, LazySlots) or not isinstance(forms, LazySlots):
            return
        if history.complete or self._loader is None:
            return
        missing = [i for i, m in enumerate(history.items) if m is None]
        got = self._loader(missing)
        lost = [i for i in missing if i not in got]
        if lost:  # nothing changed: the next use tries again
            raise StorageError(
                f"{len(lost)} stored message(s) could not be read back (first at position "
                f"{lost[0]}): the session's log is missing events its heads name"
            )
        for i in missing:
            msg = got[i]
            history.items[i] = msg
            form = self._assistant_form(msg, i) if msg.tool_calls else msg
            forms.items[i] = form
            self._tokens[i] = 0 if i in self.retracted else self._count(form)
            if i not in self.retracted:
                self._classify(i, msg)
        self.state_pins.sort()
        if self.scaffold:
            self._pick_users()
        history.filled()
        forms.filled()
        self._cum[1:] = list(itertools.accumulate(self._tokens))
        # plain lists from now on (a caller holding the LazySlots still sees the same items)
        self.history = history.items  # type: ignore[assignment]
        self.forms = forms.items  # type: ignore[assignment]
        self._loader = None
        if self._after_fill is not None:
            after, self._after_fill = self._after_fill, None
            after()

    def has_open_calls(self) -> bool:
        return bool(self._open_calls)

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

    def _dict(self, index: int) -> dict[str, Any]:
        d = self._dicts[index]
        if d is None:
            d = self._dicts[index] = to_openai(self.forms[index])
        return d

    def view_dicts(self, *, copy: bool = False) -> list[dict[str, Any]]:
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

    def _visible_view(self, get: Callable[[int], Any], compaction: Any) -> list[Any]:
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
