"""Bodies brought back: the restore side of :class:`~.store.EvidenceStore` (a pointer's body
from its archived copy, then the tool-result file, then the session transcript, then the
preview, each checked against the pointer's sha256)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from ..errors import StorageError, UnsafeIdError
from ..storage.base import BlobNotFoundError
from ..storage.session import SessionStore
from .model import EvidencePointer

_ARCHIVED = re.compile(r"evidence/[0-9a-f]{2}/([0-9a-f]{64})\.txt")

PREVIEW_CHARS = 240

RestoreSource = Literal["archived", "tool_result", "transcript", "preview"]
TranscriptLookup = Callable[[str], "str | None"]
#: Bytes of an offloaded result by the path shown in its placeholder (None when unknown).
OffloadLookup = Callable[[str], "bytes | None"]


class OffloadInfo(Protocol):
    """What the compactor knows about a tool result it wrote to disk."""

    @property
    def path(self) -> str: ...

    @property
    def sha256(self) -> str: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RestoredText:
    """A body brought back. ``sha256_ok`` is None when there was nothing to check against
    (or only the preview was left); ``problem`` says what went wrong on the way, if anything."""

    text: str
    source: RestoreSource
    sha256_ok: bool | None
    problem: str | None = None


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _preview(text: str) -> str:
    """The flattened head of a body kept in its pointer (what is left when no copy is)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


class RestoreBodies:
    """Reading a pointer's body back (the store's session and lookups are set by its owner)."""

    session: SessionStore
    transcript_lookup: TranscriptLookup | None
    offload_lookup: OffloadLookup | None

    def _bytes_at(self, path: str) -> bytes:
        """The bytes a pointer path names; OSError-like failures raise StorageError."""
        m = _ARCHIVED.fullmatch(path)
        if m is not None:
            return self.session.blob(m.group(1))
        if "\x00" in path or ".." in path.replace("\\", "/").split("/"):
            raise UnsafeIdError(f"path {path!r} escapes the session")
        data = self.offload_lookup(path) if self.offload_lookup is not None else None
        if data is None:
            raise StorageError(f"{path!r} is not a stored body of this session")
        return data

    def _logged(self, pointer: EvidencePointer) -> bytes | None:
        """The body of ``pointer`` from the message log, when it is exactly that message."""
        if not pointer.message_uuid or not pointer.sha256 or self.transcript_lookup is None:
            return None
        text = self.transcript_lookup(pointer.message_uuid)
        if text is None:
            return None
        data = _encode(text)
        return data if sha256_hex(data) == pointer.sha256 else None

    def _read_offloaded(self, info: OffloadInfo) -> bytes | None:
        try:
            return self.session.blob(str(info.sha256))
        except StorageError:
            return None

    # ----------------------------------------------------------------- restore

    def _read_checked(
        self, path: str, pointer: EvidencePointer, source: RestoreSource, notes: list[str]
    ) -> RestoredText | None:
        try:
            data = self._bytes_at(path)
        except UnsafeIdError as exc:
            notes.append(f"{source} path refused: {exc}")
            return None
        except StorageError as exc:
            missing = source == "archived" and isinstance(exc, BlobNotFoundError)
            logged = self._logged(pointer) if missing else None
            if logged is not None:  # archived in the message log itself (see _body_name)
                return self._checked(_decode(logged), logged, pointer, source, notes)
            notes.append(f"{source} copy {path!r} unreadable ({exc})")
            return None
        return self._checked(_decode(data), data, pointer, source, notes)

    def _checked(
        self,
        text: str,
        data: bytes,
        pointer: EvidencePointer,
        source: RestoreSource,
        notes: list[str],
    ) -> RestoredText:
        ok: bool | None = None
        if pointer.sha256:
            actual = sha256_hex(data)
            ok = actual == pointer.sha256
            if not ok:
                notes.append(
                    f"sha256 mismatch for {source} copy of {pointer.id}: expected "
                    f"{pointer.sha256[:12]}…, found {actual[:12]}… (the body changed since indexing)"
                )
        return RestoredText(
            text=text, source=source, sha256_ok=ok, problem="; ".join(notes) or None
        )

    def restore(self, pointer: EvidencePointer) -> RestoredText:
        """The body of ``pointer``: archived copy, then the tool-result file, then the session
        transcript, then the preview. A later source is used only when an earlier one is
        missing; a sha256 mismatch is reported in ``sha256_ok``/``problem``, not hidden."""
        notes: list[str] = []
        if pointer.archived_tool_result_path:
            got = self._read_checked(pointer.archived_tool_result_path, pointer, "archived", notes)
            if got is not None:
                return got
        if pointer.tool_result_path:
            got = self._read_checked(pointer.tool_result_path, pointer, "tool_result", notes)
            if got is not None:
                return got
        if pointer.message_uuid and self.transcript_lookup is not None:
            text = self.transcript_lookup(pointer.message_uuid)
            if text is not None:
                return self._checked(text, _encode(text), pointer, "transcript", notes)
            notes.append(f"message {pointer.message_uuid} not found in the transcript")
        notes.append("original body not found; only the preview is left")
        return RestoredText(
            text=pointer.preview, source="preview", sha256_ok=None, problem="; ".join(notes)
        )


__all__ = [
    "OffloadInfo",
    "OffloadLookup",
    "RestoreBodies",
    "RestoreSource",
    "RestoredText",
    "TranscriptLookup",
    "sha256_hex",
]
