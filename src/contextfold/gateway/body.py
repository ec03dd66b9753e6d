"""Reading a request body, without decoding again the part the client resent unchanged.

A stateless client sends its whole conversation on every call: the previous request's bytes
plus a few new messages. Decoding and checking megabytes of JSON per request would make every
turn cost in proportion to the history. So the reader remembers, for recent bodies, where each
element of the ``messages`` array ends (a byte offset). A new body that starts with the same
bytes as a remembered one up to the end of its ``k``-th message holds exactly the same first
``k`` messages: those parsed objects are reused (the same objects: later stages compare them by
identity first), and only the rest of the body is decoded and checked (nesting depth, lone
surrogates). Everything else - another encoding, a duplicate ``messages`` key, anything the
scan does not follow - goes through the standard library's parser, which also words the error.

The values are those ``json.loads`` gives (the same C scanner decodes every value).
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..jsontypes import JSON
from . import edge, fastjson

_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
#: the standard library's string decoder (the C one), as its scanner uses it
_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009
_ws = re.compile(r"[ \t\n\r]*").match

#: bytes of a body's start that group remembered bodies (a new body is compared with those)
_HEAD = 256
#: remembered bodies, at most this many and this many bytes in all (least recent dropped)
MAX_BODIES = 64
MAX_BYTES = 256 * 1024 * 1024
#: bodies this small are read whole (nothing worth remembering)
MIN_BYTES = 64 * 1024


class TooDeep(ValueError):
    """The body nests deeper than the limit."""


class _Irregular(Exception):
    """The scan cannot follow this text: the standard parser reads it."""


@dataclass(frozen=True, slots=True)
class _Known:
    raw: bytes
    #: byte offset just after the ``[`` that opens ``messages``
    opened: int
    #: byte offset just after each element of ``messages`` (an array of machine integers: no
    #: object per message for the garbage collector to visit)
    ends: array[int]
    messages: list[Any]


@dataclass(slots=True)
class _Scan:
    body: dict[str, Any]
    #: char offsets just after each element of ``messages`` (None: no ``messages`` array)
    ends: list[int] | None
    messages: list[Any] | None
    #: char offset just after the ``[`` that opens ``messages``
    opened: int = -1
    #: char offsets around each top-level value but ``messages``
    spans: list[tuple[int, int]] = field(default_factory=list)


def _skip(text: str, pos: int) -> int:
    m = _ws(text, pos)
    return m.end() if m else pos


def _value(text: str, pos: int) -> tuple[Any, int]:
    try:
        value, end = _scan_once(text, pos)
    except StopIteration:
        raise _Irregular from None
    return value, end


def _array(text: str, pos: int, items: list[Any], ends: list[int]) -> int:
    """Elements of an array from ``pos`` (after ``[`` or after an element); returns the offset
    after its ``]``."""
    pos = _skip(text, pos)
    if not items and text.startswith("]", pos):
        return pos + 1
    if items:
        if text.startswith("]", pos):
            return pos + 1
        if not text.startswith(",", pos):
            raise _Irregular
        pos = _skip(text, pos + 1)
    while True:
        value, pos = _value(text, pos)
        items.append(value)
        ends.append(pos)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif text.startswith("]", pos):
            return pos + 1
        else:
            raise _Irregular


def _members(text: str, pos: int, scan: _Scan, *, first: bool) -> int:
    """Members of the top-level object from ``pos`` (after ``{`` or after a value); returns
    the offset after its ``}``."""
    pos = _skip(text, pos)
    if text.startswith("}", pos):
        return pos + 1
    if not first:
        if not text.startswith(",", pos):
            raise _Irregular
        pos = _skip(text, pos + 1)
    while True:
        if not text.startswith('"', pos):
            raise _Irregular
        try:
            key, pos = _scanstring(text, pos + 1)
        except ValueError:
            raise _Irregular from None
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise _Irregular
        pos = _skip(text, pos + 1)
        if key == "messages":
            if scan.messages is not None or not text.startswith("[", pos):
                raise _Irregular  # a second one, or not an array: the standard parser
            scan.messages, scan.ends, scan.opened = [], [], pos + 1
            pos = _array(text, pos + 1, scan.messages, scan.ends)
            scan.body[key] = scan.messages
        else:
            start = pos
            scan.body[key], pos = _value(text, pos)
            scan.spans.append((start, pos))
        pos = _skip(text, pos)
        if text.startswith("}", pos):
            return pos + 1
        if not text.startswith(",", pos):
            raise _Irregular
        pos = _skip(text, pos + 1)


def _end(text: str, pos: int) -> None:
    if _skip(text, pos) != len(text):
        raise _Irregular  # trailing data


def _nests_deeper(text: str, scan: _Scan, limit: int) -> bool:
    """Whether a scanned body nests deeper than ``limit``. A value holds at most as many
    levels as it has brackets (in strings or not): only a value with more brackets than the
    levels it may hold is checked exactly (all in C; no pass over the whole body)."""
    if limit < 3:  # the object and its messages array alone reach 2
        return edge.too_deep(text.encode("utf-8", "surrogatepass"), limit)
    ends = scan.ends or []
    spans = [(start, end, 1) for start, end in scan.spans]
    spans += ((start, end, 2) for start, end in zip([scan.opened, *ends], ends))
    for start, end, outer in spans:
        if text.count("[", start, end) + text.count("{", start, end) <= limit - outer:
            continue
        value = text[start:end].encode("utf-8", "surrogatepass")
        if edge.too_deep(value, limit - outer):
            return True
    return False


def _byte_ends(text: str, char_ends: list[int], base: int) -> tuple[int, ...]:
    """Byte offsets (from ``base``) of char offsets of ``text`` (UTF-8)."""
    if text.isascii():
        return tuple(base + c for c in char_ends)
    out: list[int] = []
    at, b = 0, base
    for c in char_ends:
        b += len(text[at:c].encode("utf-8", "surrogatepass"))
        at = c
        out.append(b)
    return tuple(out)


class Arrival:
    """A body compared with the remembered ones while it arrives, a chunk at a time (each
    chunk just received, against the same bytes of each remembered body that has matched so
    far): once the body is in, the part a client resent unchanged is known without reading
    its megabytes again."""

    __slots__ = ("_early", "_live", "_pos", "_reader", "_settled")

    def __init__(self, reader: BodyReader) -> None:
        self._reader = reader
        self._early: list[bytes] = []
        #: remembered bodies equal to everything fed so far (None: the head is not in yet)
        self._live: list[_Known] | None = None
        #: (remembered body, bytes equal) of those that stopped matching
        self._settled: list[tuple[_Known, int]] = []
        self._pos = 0

    def feed(self, chunk: bytes) -> None:
        if self._live is None:
            self._early.append(chunk)
            if sum(map(len, self._early)) < _HEAD:
                return
            chunk = b"".join(self._early)
            self._early = []
            head = chunk[:_HEAD]
            self._live = [kn for kn in self._reader.remembered() if kn.raw[:_HEAD] == head]
        if not self._live:
            self._pos += len(chunk)
            return
        pos = self._pos
        live: list[_Known] = []
        for kn in self._live:
            if kn.raw.startswith(chunk, pos):
                live.append(kn)
            else:  # equal up to this chunk (at least)
                self._settled.append((kn, pos))
        self._live = live
        self._pos = pos + len(chunk)

    def compared(self, raw: bytes) -> list[tuple[_Known, int]] | None:
        """The candidates for ``raw`` and how many of its leading bytes each is known to
        share; None when ``raw`` is not what was fed (then nothing is known)."""
        if self._live is None or self._pos != len(raw):
            return None
        return [*self._settled, *((kn, self._pos) for kn in self._live)]


class BodyReader:
    """Parses request bodies (see the module doc); one per gateway process."""

    def __init__(self, max_bodies: int = MAX_BODIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_bodies = max_bodies
        self.max_bytes = max_bytes
        self._known: OrderedDict[int, _Known] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: messages the last :meth:`read` reused (for tests and metrics)
        self.reused = 0

    def arrival(self) -> Arrival:
        """A comparer to :meth:`~Arrival.feed` the body's chunks as they arrive, then pass
        to :meth:`read` with the whole body."""
        return Arrival(self)

    def read(
        self, raw: bytes, depth: int, arrival: Arrival | None = None
    ) -> tuple[JSON, str | None]:
        """The parsed body and where it holds a lone surrogate (None: nowhere). Raises
        :class:`TooDeep`, ``ValueError`` (not JSON) or ``RecursionError``. ``arrival``: the
        comparer the body's chunks were fed to (its bytes compared already are not again)."""
        self.reused = 0
        if len(raw) >= MIN_BYTES:
            known, k = self._match(raw, arrival)
            if known is not None and k:
                try:
                    out = self._resume(raw, known, k, depth)
                except (_Irregular, UnicodeDecodeError):
                    out = None
                if out is not None:
                    self.reused = k
                    return out
        return self._whole(raw, depth)

    # ------------------------------------------------------------------ reading
    def _whole(self, raw: bytes, depth: int) -> tuple[JSON, str | None]:
        scan: _Scan | None = None
        text = ""
        if len(raw) < MIN_BYTES:
            return self._standard(raw, depth)
        try:
            text = raw.decode("utf-8")
            if not text.startswith("\ufeff"):
                scan = _Scan(body={}, ends=None, messages=None)
                pos = _skip(text, 0)
                if not text.startswith("{", pos):
                    raise _Irregular
                _end(text, _members(text, pos + 1, scan, first=True))
        except (_Irregular, UnicodeDecodeError, ValueError, RecursionError):
            # not JSON, or nested past the scanner's own limit: the depth is checked first
            # there, so a body both too deep and broken is refused as too deep
            scan = None
        if scan is None:  # the standard parser: its value, or its error
            return self._standard(raw, depth)
        if _nests_deeper(text, scan, depth):
            raise TooDeep
        where = self._surrogate(scan.body, raw)
        if where is None and scan.ends and scan.messages is not None:
            opened, *ends = _byte_ends(text, [scan.opened, *scan.ends], 0)
            self._remember(_Known(raw, opened, array("q", ends), scan.messages))
        return scan.body, where

    def _resume(
        self, raw: bytes, known: _Known, k: int, depth: int
    ) -> tuple[JSON, str | None] | None:
        """The body, its first ``k`` messages those of ``known`` (the same bytes)."""
        cut = known.ends[k - 1]
        rest = raw[cut:]
        # the bytes before ``cut`` are those of a body already checked; after it: inside the
        # top-level object and the messages array, outside any string
        if edge.too_deep(b"{[" + rest, depth):
            raise TooDeep
        scan = _Scan(body={}, ends=None, messages=None)
        # the members before "messages", read up to its opening bracket
        if not self._head(raw[: known.opened].decode("utf-8"), scan):
            return None
        text = rest.decode("utf-8")
        items = known.messages[:k]
        char_ends: list[int] = []
        pos = _array(text, 0, items, char_ends)
        scan.messages, scan.ends = items, char_ends
        scan.body["messages"] = items
        _end(text, _members(text, pos, scan, first=False))
        # the first k messages passed this check before (a pair of surrogates is in one string)
        where = edge.lone_surrogate(scan.body) if edge.may_hold_surrogates(rest) else None
        if where is None:
            ends = known.ends[:k] + array("q", _byte_ends(text, char_ends, cut))
            self._remember(_Known(raw, known.opened, ends, items), replaces=known)
        return scan.body, where

    @staticmethod
    def _head(head: str, scan: _Scan) -> bool:
        """Read ``{ members..., "messages": [`` into ``scan.body``; False when the head is not
        that."""
        pos = _skip(head, 0)
        if not head.startswith("{", pos):
            return False
        pos = _skip(head, pos + 1)
        while True:
            if not head.startswith('"', pos):
                return False
            try:
                key, pos = _scanstring(head, pos + 1)
            except ValueError:
                return False
            pos = _skip(head, pos)
            if not head.startswith(":", pos):
                return False
            pos = _skip(head, pos + 1)
            if key == "messages":
                return head.startswith("[", pos) and pos + 1 == len(head)
            scan.body[key], pos = _value(head, pos)
            pos = _skip(head, pos)
            if not head.startswith(",", pos):
                return False
            pos = _skip(head, pos + 1)

    def _standard(self, raw: bytes, depth: int) -> tuple[JSON, str | None]:
        """The standard parser's value (or its error), its depth checked first."""
        if edge.too_deep(raw, depth):
            raise TooDeep
        body = fastjson.loads(raw)
        return body, self._surrogate(body, raw)

    @staticmethod
    def _surrogate(body: Any, raw: bytes) -> str | None:
        return edge.lone_surrogate(body) if edge.may_hold_surrogates(raw) else None

    # ------------------------------------------------------------------ remembering
    def remembered(self) -> list[_Known]:
        """The remembered bodies, least recent first (their ``messages`` are the objects later
        requests share: no stage may change them in place)."""
        with self._lock:
            return list(self._known.values())

    def _match(self, raw: bytes, arrival: Arrival | None) -> tuple[_Known | None, int]:
        """The remembered body sharing the most leading messages with ``raw``, and how many."""
        pairs = arrival.compared(raw) if arrival is not None else None
        if pairs is None:
            with self._lock:
                pairs = [(kn, 0) for kn in self._known.values() if raw[:_HEAD] == kn.raw[:_HEAD]]
        best: tuple[_Known | None, int] = (None, 0)
        for kn, equal in pairs:
            k = self._shared(raw, kn, equal)
            if k > best[1]:
                best = (kn, k)
        return best

    @staticmethod
    def _shared(raw: bytes, kn: _Known, equal: int = 0) -> int:
        """How many leading messages of ``kn`` the body ``raw`` holds byte for byte, its first
        ``equal`` bytes known to be those of ``kn`` already."""
        old = memoryview(kn.raw)

        def same(i: int) -> bool:  # the first i + 1 messages (one memcmp, no copy)
            end = kn.ends[i]
            return end <= equal or raw.startswith(old[equal:end], equal)

        n = len(kn.ends)
        if same(n - 1):
            return n
        lo, hi = 0, n - 1  # same(lo - 1) holds (or lo == 0); same(hi) does not
        if not same(0):
            return 0
        lo = bisect.bisect_right(kn.ends, equal, 0, n - 1)  # those are the same: no memcmp
        lo = max(lo, 1)
        while lo < hi:
            mid = (lo + hi) // 2
            if same(mid):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _remember(self, kn: _Known, replaces: _Known | None = None) -> None:
        with self._lock:
            if replaces is not None and self._known.pop(id(replaces), None) is not None:
                self._bytes -= len(replaces.raw)
            if len(kn.raw) > self.max_bytes // 4:
                return
            self._known[id(kn)] = kn
            self._bytes += len(kn.raw)
            while self._known and (
                len(self._known) > self.max_bodies or self._bytes > self.max_bytes
            ):
                _, gone = self._known.popitem(last=False)
                self._bytes -= len(gone.raw)


__all__ = ["Arrival", "BodyReader", "TooDeep"]
