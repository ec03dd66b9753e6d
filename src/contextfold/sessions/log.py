"""The raw session log: ``<ws>/sessions/<id>/log.jsonl``, append-only, never compacted.

LOG_FORMAT: one JSON object per line::

    {"seq": int (0-based position), "uuid": str, "ts": ISO-8601 UTC str,
     "message": <OpenAI dict from contextfold.wire.to_openai>, "metadata": {...}}

Every message is written as it arrives, so the log is the session's full history: compaction
changes only the view sent to the model, never this file. ``meta.json`` beside it carries the
session id, owning agent, timestamps, a title (the first user message, trimmed) and the count.

Crash safety: one ``append`` writes all its lines with a single ``write()`` and flush (and
``fsync`` when asked). A crash mid-write can only leave a torn *last* line; reading skips it and
records it in :attr:`SessionLog.problems`, and the next append cuts it off before writing. A
corrupt line anywhere else is real damage and raises :class:`StorageError` naming the line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ContextFoldError, StorageError, UnsafeIdError
from ..messages import Message
from ..paths import Workspace, check_session_id
from ..wire import loads_message, to_openai

if TYPE_CHECKING:
    from .index import SessionIndex

TITLE_CHARS = 120


@dataclass(frozen=True, kw_only=True, slots=True)
class LogEntry:
    """One line of the raw log."""

    seq: int
    uuid: str
    ts: str
    message: Message


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionMeta:
    """The content of ``meta.json``."""

    session_id: str
    agent_id: str
    created_at: str
    updated_at: str
    title: str
    message_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "title": self.title,
            "message_count": self.message_count,
        }

    @classmethod
    def from_json(cls, data: Any, *, where: str) -> SessionMeta:
        if not isinstance(data, dict):
            raise StorageError(f"{where}: meta.json is not a JSON object")
        try:
            return cls(
                session_id=str(data["session_id"]),
                agent_id=str(data.get("agent_id") or "default"),
                created_at=str(data.get("created_at") or ""),
                updated_at=str(data.get("updated_at") or ""),
                title=str(data.get("title") or ""),
                message_count=int(data.get("message_count") or 0),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(f"{where}: meta.json is malformed ({exc})") from None


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def make_title(text: str) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= TITLE_CHARS:
        return flat
    return flat[: TITLE_CHARS - 1].rstrip() + "…"


def _atomic_write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc}") from exc


def _parse_line(raw: bytes, lineno: int) -> LogEntry:
    """Parse one stored line; raises ValueError or ContextFoldError on damage."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    msg = loads_message(data, index=lineno - 1)
    seq = data.get("seq")
    if not isinstance(seq, int):
        raise ValueError("line has no integer seq")
    return LogEntry(seq=seq, uuid=msg.uuid, ts=str(data.get("ts") or ""), message=msg)


def iter_log_file(path: Path, start: int = 0) -> Iterator[tuple[LogEntry, int, str | None]]:
    """Low level: yield ``(entry, end_offset, None)`` for each good line from byte ``start``.

    A damaged *last* line ends the iteration with one ``(_TORN, line_start, problem)`` item;
    a damaged line followed by more data raises :class:`StorageError` naming its line number.
    """
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    with fh:
        fh.seek(start)
        offset = start
        bad: tuple[int, int, str] | None = None  # (line number, line start, problem)
        for lineno, raw in enumerate(fh, start=1):
            end = offset + len(raw)
            if raw.strip():
                if bad is not None:
                    where = f"line {bad[0]}" if start == 0 else f"line {bad[0]} after byte {start}"
                    raise StorageError(f"{path}: {where} is corrupt ({bad[2]})")
                try:
                    entry = _parse_line(raw, lineno)
                except (ValueError, ContextFoldError) as exc:
                    bad = (lineno, offset, str(exc))
                else:
                    yield entry, end, None
            offset = end
        if bad is not None:
            problem = f"{path}: line {bad[0]} is damaged ({bad[2]}); skipped as a torn last write"
            yield _TORN, bad[1], problem


#: Sentinel entry standing for a torn last line (never returned to users).
_TORN = LogEntry(seq=-1, uuid="", ts="", message=Message(role="user", content=""))


class SessionLog:
    """Append-only raw log of one session, plus its ``meta.json``."""

    def __init__(
        self,
        workspace: Workspace,
        session_id: str,
        *,
        agent_id: str = "default",
        fsync: bool = False,
    ) -> None:
        self.workspace = workspace
        self.session_id = check_session_id(session_id)
        if not isinstance(agent_id, str) or not agent_id:
            raise UnsafeIdError(f"agent id must be a non-empty string, got {agent_id!r}")
        self.dir = workspace.session_dir(session_id)
        self.path = workspace.log_path(session_id)
        self.meta_path = workspace.meta_path(session_id)
        self.fsync = fsync
        #: Damage found while reading (a torn last line): text records, newest last.
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._meta: SessionMeta | None = None
        self._next_seq: int | None = None
        existing = self._read_meta()
        # The session belongs to the agent that created it.
        self.agent_id = existing.agent_id if existing else agent_id

    # ------------------------------------------------------------------ meta

    def _read_meta(self) -> SessionMeta | None:
        try:
            text = self.meta_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {self.meta_path}: {exc}") from exc
        try:
            data = json.loads(text)
        except ValueError:
            self.problems.append(f"{self.meta_path}: not valid JSON; rebuilt from the log")
            return None
        try:
            meta = SessionMeta.from_json(data, where=str(self.meta_path))
        except StorageError as exc:
            self.problems.append(f"{exc}; rebuilt from the log")
            return None
        self._meta = meta
        return meta

    def meta(self) -> SessionMeta:
        """The session's metadata (rebuilt from the log if meta.json is missing or broken)."""
        with self._lock:
            if self._meta is None and self._read_meta() is None:
                self._meta = self._meta_from_log()
            assert self._meta is not None
            return self._meta

    def _meta_from_log(self) -> SessionMeta:
        title = ""
        count = 0
        first_ts = last_ts = ""
        for entry in self._iter():
            count = entry.seq + 1
            first_ts = first_ts or entry.ts
            last_ts = entry.ts or last_ts
            if not title and entry.message.role == "user":
                title = make_title(entry.message.text)
        now = utc_now()
        return SessionMeta(
            session_id=self.session_id,
            agent_id=self.agent_id,
            created_at=first_ts or now,
            updated_at=last_ts or now,
            title=title,
            message_count=count,
        )

    # ------------------------------------------------------------------ write

    def _prepare_tail(self) -> int:
        """Cut a torn last line off and return the next seq. Called once, under the lock."""
        next_seq = 0
        good_end = 0
        for entry, end, problem in iter_log_file(self.path):
            if problem is not None:
                self.problems.append(problem)
                break
            next_seq = entry.seq + 1
            good_end = end
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return next_seq
        if size != good_end:
            with self.path.open("r+b") as fh:
                fh.truncate(good_end)
            self.problems.append(
                f"{self.path}: cut {size - good_end} bytes of a torn last line before appending"
            )
        return next_seq

    def append(self, messages: Sequence[Message], *, ts: str | None = None) -> list[LogEntry]:
        """Append messages (one write for all of them) and update meta.json.

        Returns the entries written (feed them to :meth:`SessionIndex.add`).
        """
        if not messages:
            return []
        stamp = ts or utc_now()
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            if self._next_seq is None:
                self._next_seq = self._prepare_tail()
            seq = self._next_seq
            lines: list[str] = []
            entries: list[LogEntry] = []
            for msg in messages:
                if not isinstance(msg, Message):
                    raise StorageError(
                        f"session {self.session_id}: append expects Message objects, "
                        f"got {type(msg).__name__}"
                    )
                record = {
                    "seq": seq,
                    "uuid": msg.uuid,
                    "ts": stamp,
                    "message": to_openai(msg),
                    "metadata": dict(msg.metadata),
                }
                try:
                    lines.append(json.dumps(record, ensure_ascii=False, default=str))
                except (TypeError, ValueError) as exc:
                    raise StorageError(
                        f"session {self.session_id}: message {msg.uuid} is not JSON-serializable "
                        f"({exc})"
                    ) from exc
                entries.append(LogEntry(seq=seq, uuid=msg.uuid, ts=stamp, message=msg))
                seq += 1
            data = ("\n".join(lines) + "\n").encode("utf-8")
            try:
                with self.path.open("ab") as fh:
                    fh.write(data)
                    fh.flush()
                    if self.fsync:
                        os.fsync(fh.fileno())
            except OSError as exc:
                raise StorageError(f"cannot append to {self.path}: {exc}") from exc
            self._next_seq = seq
            self._update_meta(entries, stamp)
            return entries

    def _update_meta(self, entries: Sequence[LogEntry], stamp: str) -> None:
        old = self._meta or self._read_meta()
        if old is None and entries[0].seq > 0:
            old = self._meta_from_log_locked_prefix(entries[0].seq)
        title = old.title if old else ""
        if not title:
            for e in entries:
                if e.message.role == "user" and e.message.text.strip():
                    title = make_title(e.message.text)
                    break
        meta = SessionMeta(
            session_id=self.session_id,
            agent_id=self.agent_id,
            created_at=old.created_at if old else stamp,
            updated_at=stamp,
            title=title,
            message_count=entries[-1].seq + 1,
        )
        _atomic_write_json(self.meta_path, meta.to_json())
        self._meta = meta

    def _meta_from_log_locked_prefix(self, count: int) -> SessionMeta:
        title = ""
        first_ts = ""
        for entry in self._iter():
            if entry.seq >= count:
                break
            first_ts = first_ts or entry.ts
            if not title and entry.message.role == "user":
                title = make_title(entry.message.text)
        return SessionMeta(
            session_id=self.session_id,
            agent_id=self.agent_id,
            created_at=first_ts or utc_now(),
            updated_at=first_ts,
            title=title,
            message_count=count,
        )

    # ------------------------------------------------------------------ read

    def _iter(self, start: int = 0) -> Iterator[LogEntry]:
        for entry, _end, problem in iter_log_file(self.path, start):
            if problem is not None:
                if problem not in self.problems:
                    self.problems.append(problem)
                return
            yield entry

    def iter_entries(self) -> Iterator[LogEntry]:
        """All good entries in order. A torn last line is skipped (see :attr:`problems`)."""
        return self._iter()

    def iter_from(self, offset: int) -> Iterator[tuple[LogEntry, int]]:
        """Entries from byte ``offset`` (a line start) with each one's end offset."""
        for entry, end, problem in iter_log_file(self.path, offset):
            if problem is not None:
                if problem not in self.problems:
                    self.problems.append(problem)
                return
            yield entry, end

    def read(self) -> list[Message]:
        """The full history, in order (uuid and metadata preserved)."""
        return [e.message for e in self._iter()]

    def exists(self) -> bool:
        return self.path.is_file() or self.meta_path.is_file()

    def delete(self, index: SessionIndex | None = None) -> None:
        """Remove the whole session folder (and the session from ``index`` when given)."""
        with self._lock:
            if self.dir.exists():
                try:
                    shutil.rmtree(self.dir)
                except OSError as exc:
                    raise StorageError(f"cannot delete {self.dir}: {exc}") from exc
            self._meta = None
            self._next_seq = None
        if index is not None:
            index.remove_session(self.session_id)


def list_session_ids(workspace: Workspace) -> list[str]:
    """Ids of sessions with a log (or meta) on disk, sorted. Odd folder names are ignored."""
    try:
        children = list(workspace.sessions_dir.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {workspace.sessions_dir}: {exc}") from exc
    out: list[str] = []
    for child in children:
        try:
            check_session_id(child.name)
        except UnsafeIdError:
            continue
        if (child / "log.jsonl").is_file() or (child / "meta.json").is_file():
            out.append(child.name)
    return sorted(out)


def read_meta(workspace: Workspace, session_id: str) -> SessionMeta | None:
    """meta.json of a session, or None when the session does not exist."""
    log = SessionLog(workspace, session_id)
    if not log.exists():
        return None
    return log.meta()


__all__ = [
    "LogEntry",
    "SessionLog",
    "SessionMeta",
    "list_session_ids",
    "read_meta",
    "utc_now",
]
