"""One offload store, several policies (compaction offload, ingest offload, eviction).

The store keeps a tool result byte-exact as a blob (sha256) and records an ``offload`` event in
the session's log; the placeholder names it ``sessions/<id>/tool_results/<safe id>.txt`` (the
file ``contextfold export`` writes). A policy decides *when* to offload and *what placeholder* stays in the
view. Writing is idempotent per tool call id, and every failure raises :class:`StorageError`
so the caller can keep the original text and record why (fail-open).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..core.config import DEFAULT_EVICTION_EXCLUDES
from ..core.paths import confined, safe_name
from ..core.records import OffloadEntry
from ..errors import StorageError
from ..storage.base import Event
from ..storage.session import SessionStore

#: Prefixes that mark content as already offloaded (ours, and the design notes' OffloadHook marker).
OFFLOADED_PREFIXES = ("[offloaded:", "[输出已保存至", "[evicted:")


def offloadable_text(content: object) -> str | None:
    """The text of a tool result that can be offloaded: plain text, or content blocks that are
    all text blocks (a result with an image or other block is left alone)."""
    if isinstance(content, str):
        return content
    if isinstance(content, tuple | list) and content:
        texts = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text":
                return None
            texts.append(str(block.get("text", "")))
        return "\n".join(texts)
    return None


def is_offloaded_text(text: str) -> bool:
    return text.lstrip().startswith(OFFLOADED_PREFIXES)


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadPolicy:
    """When to offload and what stays in the view.

    ``style="preview"``: the compaction placeholder (path, lines, size, first ``preview_lines``).
    ``style="head_tail"``: eviction's preview (``head_chars`` + ``tail_chars`` and one line
    saying how to read the rest).
    """

    name: str
    threshold: int
    style: str = "preview"
    preview_lines: int = 10
    #: characters of each preview line kept
    line_chars: int = 300
    head_chars: int = 2_000
    tail_chars: int = 2_000
    exclude_tools: tuple[str, ...] = ()

    def applies(self, text: str, tool_name: str | None) -> bool:
        if len(text) <= self.threshold or is_offloaded_text(text):
            return False
        return not (tool_name and _matches(tool_name, self.exclude_tools))


def _matches(name: str, patterns: Collection[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


COMPACTION_POLICY = OffloadPolicy(name="compaction", threshold=4_000)
INGEST_POLICY = OffloadPolicy(name="ingest", threshold=10_000)
EVICTION_POLICY = OffloadPolicy(
    name="eviction", threshold=80_000, style="head_tail", exclude_tools=DEFAULT_EVICTION_EXCLUDES
)


def _kb(n: int) -> str:
    return f"{n / 1024:.1f}KB" if n < 10 * 1024 else f"{n // 1024}KB"


def placeholder(entry: OffloadEntry, text: str, policy: OffloadPolicy) -> str:
    """The text that replaces an offloaded result in the view."""
    how = f'read_offloaded(id="{entry.tool_call_id}")'
    if policy.style == "head_tail":
        head = text[: policy.head_chars]
        tail = text[-policy.tail_chars :] if policy.tail_chars else ""
        omitted = len(text) - len(head) - len(tail)
        return (
            f"[evicted: {entry.path} | {entry.lines} lines / {_kb(entry.bytes)} | sha256 "
            f"{entry.sha256[:16]}]\n{head}\n... [{omitted} characters omitted] ...\n{tail}\n"
            f"[Full output ({entry.chars} characters) saved to {entry.path}; read it with {how} "
            f"using offset/limit]"
        )
    lines = text.split("\n")
    preview = "\n".join(line[: policy.line_chars] for line in lines[: policy.preview_lines])
    return (
        f"[offloaded: {entry.path} | {entry.lines} lines / {_kb(entry.bytes)} | sha256 "
        f"{entry.sha256[:16]}]\nPreview (first {min(policy.preview_lines, len(lines))} lines):\n"
        f"{preview}\n...(full result saved to file; read it with {how})"
    )


class OffloadStore:
    """Offloaded results of one session: bytes in the store's blobs (by sha256), one
    ``offload`` event per result in the session's log.

    ``root`` (eviction's ``offload_root``) also writes each result as a plain file in that folder
    (atomically), for people and tools that want files; the blob stays the source of truth.
    """

    def __init__(
        self, session: SessionStore, *, root: Path | None = None, name: str = "default"
    ) -> None:
        self.session = session
        self.session_id = session.session_id
        self.root = root
        self.name = name
        self._entries: dict[str, OffloadEntry] = {}

    @property
    def dir(self) -> Path | None:
        return self.root

    def load(self, events: Iterable[Event]) -> None:
        """Take the entries of stored ``offload`` events written by this store."""
        for ev in events:
            if ev.data.get("store", "default") != self.name:
                continue
            try:
                entry = OffloadEntry.from_dict(ev.data["entry"])
            except (KeyError, TypeError, ValueError):
                continue
            self._entries[entry.tool_call_id] = entry

    def entries(self) -> dict[str, OffloadEntry]:
        return dict(self._entries)

    def get(self, tool_call_id: str) -> OffloadEntry | None:
        return self._entries.get(tool_call_id)

    def _path_for(self, tool_call_id: str) -> str:
        name = safe_name(tool_call_id, what="tool call id") + ".txt"
        if self.root is None:  # the name shown in placeholders (and written by export)
            return f"sessions/{self.session_id}/tool_results/{name}"
        return str(confined(self.root, self.root / name))

    # -------------------------------------------------------------- write / read
    def write(
        self,
        tool_call_id: str,
        text: str,
        *,
        message_uuid: str,
        policy: str,
        tool_name: str | None = None,
    ) -> OffloadEntry:
        """Store ``text`` for ``tool_call_id`` (idempotent). Raises StorageError/UnsafeIdError."""
        data = text.encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(data).hexdigest()
        known = self._entries.get(tool_call_id)
        if known is not None and known.sha256 == digest:
            return known
        path = self._path_for(tool_call_id)
        self.session.put_blob(data)
        if self.root is not None:
            _mirror(Path(path), data)
        entry = OffloadEntry(
            tool_call_id=tool_call_id,
            message_uuid=message_uuid,
            path=path,
            sha256=digest,
            chars=len(text),
            bytes=len(data),
            lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            policy=policy,
            tool_name=tool_name,
        )
        self.session.emit("offload", {"entry": entry.to_dict(), "store": self.name})
        self._entries[tool_call_id] = entry
        return entry

    def read(self, tool_call_id: str) -> str:
        """The exact stored text; raises StorageError if missing or its sha256 does not match."""
        entry = self._entries.get(tool_call_id)
        if entry is None:
            raise StorageError(f"no offloaded result for tool call {tool_call_id!r}")
        try:
            data = self.session.blob(entry.sha256)
        except StorageError as exc:
            raise StorageError(f"offloaded result {entry.path} is unreadable: {exc}") from exc
        return data.decode("utf-8", "surrogatepass")

    def find(self, ref: str) -> OffloadEntry | None:
        """The entry named by a tool call id or by the path shown in its placeholder."""
        entry = self._entries.get(ref)
        if entry is not None:
            return entry
        clean = ref.strip()
        while clean.startswith("./"):
            clean = clean[2:]
        if not clean or ".." in Path(clean).parts:
            return None
        for e in self._entries.values():
            if e.path == clean or e.path.endswith("/" + clean):
                return e
        return None

    def read_page(self, ref: str, *, offset: int = 0, limit: int = 200) -> str:
        """Lines ``offset``..``offset+limit`` of an offloaded result, by tool call id or path.

        Only results of this session can be named: any other path is refused.
        """
        if offset < 0 or limit <= 0:
            raise StorageError("offset must be >= 0 and limit > 0")
        entry = self.find(ref)
        if entry is None:
            raise StorageError(f"{ref!r} is not an offloaded result of this session")
        text = self.read(entry.tool_call_id)
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()  # a final newline ends the last line; it does not start a new one
        page = lines[offset : offset + limit]
        end = offset + len(page)
        header = (
            f"[{entry.path} | lines {offset + 1}-{end} of {len(lines)} | sha256 ok]"
            if page
            else f"[{entry.path} | no lines at offset {offset}; the file has {len(lines)} lines]"
        )
        more = (
            f"\n[... {len(lines) - end} more lines: call again with offset={end}]"
            if end < len(lines)
            else ""
        )
        return header + "\n" + "\n".join(page) + more


def _mirror(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc}") from exc
