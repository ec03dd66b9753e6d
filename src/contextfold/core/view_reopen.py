"""Reopening a stored session without reading its whole log (part of :mod:`contextfold.core.view`).

A reopened :class:`~contextfold.core.view.HistoryView` is rebuilt from the stored message heads
(:meth:`LazyReopen.adopt`); the messages before its compaction boundary stay unloaded in
:class:`LazySlots` until one is needed, then all of them are read at once (``_fill``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast, overload

from ..errors import InvalidMessageError, StorageError
from ..jsontypes import JSONObject
from .messages import Message

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

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        got = self.items[index]
        if self._hi > self._lo and (
            got is None if not isinstance(index, slice) else any(m is None for m in got)  # type: ignore[union-attr]
        ):
            self._fill()
            got = self.items[index]
        return cast("Message | list[Message]", got)  # (filled: no slot is None)

    def __iter__(self) -> Iterator[Message]:
        if self._hi > self._lo:
            self._fill()
        return iter(self.items)  # type: ignore[arg-type]

    def append(self, msg: Message) -> None:
        self.items.append(msg)

    def __setitem__(self, index: int, msg: Message) -> None:
        self.items[index] = msg


class LazyReopen:
    """The lazy-reopen part of :class:`~contextfold.core.view.HistoryView` (a mixin: the view's
    state is declared here and set by the view's constructor)."""

    _count: CountFn
    history: list[Message]
    forms: list[Message]
    _tokens: list[int]
    _cum: list[int]
    _dicts: list[JSONObject | None]
    prefix_len: int
    boundary: int
    first_user: int | None
    newest_user: int | None
    _open_calls: dict[str, int]
    _answered: dict[int, set[str]]
    _call_index: dict[str, int]
    uuids: dict[str, int]
    later_system: list[int]
    tool_ids: list[str | None]
    _results: dict[str, int]
    _loader: Callable[[list[int]], dict[int, Message]] | None
    _after_fill: Callable[[], None] | None
    roles: list[str]
    retracted: set[int]
    scaffold: set[int]
    state_pins: list[int]

    if TYPE_CHECKING:  # defined by the view

        def _classify(self, n: int, msg: Message) -> None: ...

        def _assistant_form(self, msg: Message, index: int) -> Message: ...

        def _pick_users(self) -> None: ...

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
