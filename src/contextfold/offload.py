"""One offload store, several policies (seed 000 section 3, seed 002 section 2.2).

The store writes a tool result byte-exact to ``sessions/<id>/tool_results/<safe id>.txt`` and
remembers its sha256; a policy decides *when* to offload and *what placeholder* stays in the
view. Writing is idempotent per tool call id, and every failure raises :class:`StorageError`
so the caller can keep the original text and record why (fail-open).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from .errors import StorageError, UnsafeIdError
from .paths import Workspace, confined, safe_name
from .records import OffloadEntry

#: Prefixes that mark content as already offloaded (ours, and the seed's OffloadHook marker).
OFFLOADED_PREFIXES = ("[offloaded:", "[输出已保存至", "[evicted:")

DEFAULT_EVICTION_EXCLUDES: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "grep_files",
    "glob_files",
    "list_files",
    "memory_*",
    "session_search",
    "read_offloaded",
    "recall",
)


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

    ``style="preview"``: seed 000's placeholder (path, lines, size, first ``preview_lines``).
    ``style="head_tail"``: seed 002's eviction (``head_chars`` + ``tail_chars`` and one line
    saying how to read the rest).
    """

    name: str
    threshold: int
    style: str = "preview"
    preview_lines: int = 10
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
    preview = "\n".join(line[:300] for line in lines[: policy.preview_lines])
    return (
        f"[offloaded: {entry.path} | {entry.lines} lines / {_kb(entry.bytes)} | sha256 "
        f"{entry.sha256[:16]}]\nPreview (first {min(policy.preview_lines, len(lines))} lines):\n"
        f"{preview}\n...(full result saved to file; read it with {how})"
    )


class OffloadStore:
    """Files of one session. ``root`` overrides the folder (seed 002's offloadRoot)."""

    def __init__(self, workspace: Workspace, session_id: str, *, root: Path | None = None) -> None:
        self.workspace = workspace
        self.session_id = session_id
        self.dir = root if root is not None else workspace.tool_results_dir(session_id)
        self._index_path = self.dir / "index.jsonl"
        self._entries: dict[str, OffloadEntry] = {}
        self._load_index()

    # -------------------------------------------------------------- index
    def _load_index(self) -> None:
        if not self._index_path.exists():
            return
        with self._index_path.open("r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    entry = OffloadEntry.from_dict(json.loads(line))
                except (ValueError, TypeError, AttributeError):
                    continue  # torn or foreign line: the file itself is still there
                self._entries[entry.tool_call_id] = entry

    def entries(self) -> dict[str, OffloadEntry]:
        return dict(self._entries)

    def get(self, tool_call_id: str) -> OffloadEntry | None:
        return self._entries.get(tool_call_id)

    def _relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.workspace.root.resolve()).as_posix()
        except ValueError:
            return str(path.resolve())

    def file_for(self, tool_call_id: str) -> Path:
        name = safe_name(tool_call_id, what="tool call id") + ".txt"
        return confined(self.dir, self.dir / name)

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
            path = (
                self.workspace.root / known.path
                if not Path(known.path).is_absolute()
                else Path(known.path)
            )
            if path.exists():
                return known
        path = self.file_for(tool_call_id)
        entry = OffloadEntry(
            tool_call_id=tool_call_id,
            message_uuid=message_uuid,
            path=self._relative(path),
            sha256=digest,
            chars=len(text),
            bytes=len(data),
            lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            policy=policy,
            tool_name=tool_name,
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
            with self._index_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry.to_dict(), ensure_ascii=False) + "\n")
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise StorageError(f"offload of tool result {tool_call_id!r} failed: {exc}") from exc
        self._entries[tool_call_id] = entry
        return entry

    def path_of(self, entry: OffloadEntry) -> Path:
        p = Path(entry.path)
        return p if p.is_absolute() else self.workspace.root / p

    def read(self, tool_call_id: str) -> str:
        """The exact stored text; raises StorageError if missing or its sha256 does not match."""
        entry = self._entries.get(tool_call_id)
        if entry is None:
            raise StorageError(f"no offloaded result for tool call {tool_call_id!r}")
        try:
            data = self.path_of(entry).read_bytes()
        except OSError as exc:
            raise StorageError(f"offloaded result {entry.path} is unreadable: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise StorageError(f"offloaded result {entry.path} does not match its sha256")
        return data.decode("utf-8", "surrogatepass")

    def read_page(self, ref: str, *, offset: int = 0, limit: int = 200) -> str:
        """Lines ``offset``..``offset+limit`` of an offloaded file, by tool call id or path.

        Paths are confined to this session's folder: ``../`` or absolute paths elsewhere fail.
        """
        if offset < 0 or limit <= 0:
            raise StorageError("offset must be >= 0 and limit > 0")
        entry = self._entries.get(ref)
        if entry is None:
            candidate = Path(ref)
            base = self.dir
            full = candidate if candidate.is_absolute() else self.workspace.root / candidate
            if not candidate.is_absolute() and not str(ref).startswith(("sessions/", "./")):
                full = base / candidate
            try:
                full = confined(base, full)
            except UnsafeIdError:
                raise StorageError(f"{ref!r} is not an offloaded result of this session") from None
            match = [e for e in self._entries.values() if self.path_of(e).resolve() == full]
            if not match:
                raise StorageError(f"{ref!r} is not an offloaded result of this session")
            entry = match[0]
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
