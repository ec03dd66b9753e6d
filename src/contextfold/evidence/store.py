"""The recoverable store: content-addressed bodies plus the thin index.

Bodies are blobs of the session's store (by sha256; a pointer names one as
``evidence/<sha[:2]>/<sha>.txt``, the file ``contextfold export`` writes). Each
:class:`CompactBlock` is an ``evidence`` event of the session's log, and each of its pointers a
row of the store's search index (namespace ``"evidence"``), written in the same unit of work as
the compaction that made it. :class:`EvidenceStore` turns the range a compaction removed into a
:class:`CompactBlock` (:meth:`EvidenceStore.index_compaction`), files a sub-agent's output
(:meth:`EvidenceStore.add_subagent_output`) and gets a body back (:mod:`.store_restore`); the
semantic vectors of a block are filed after the answer (:mod:`.store_vectors`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..core.messages import Message
from ..core.scaffolding import strip_scaffolding
from ..errors import UnsafeIdError
from ..storage.session import SessionStore
from . import semantic, store_vectors
from .block_fields import CompactionFields
from .classify import (
    classify,
    link_summary_item,
    link_summary_items,
    summary_hints,
)
from .fields import CallFields, call_fields, is_own_tool, lines_text
from .keys import (
    NAMESPACE,
    STATE_NAMESPACE,
    Ords,
    block_terms,
    command_key,
    fits,
    pointer_key,
    search_docs,
    state_key,
    terms_id,
)
from .lookups import IndexState, seed
from .model import CompactBlock, EvidenceFormatError, EvidencePointer
from .store_restore import (
    OffloadInfo,
    OffloadLookup,
    RestoreBodies,
    RestoredText,
    TranscriptLookup,
    _decode,
    _encode,
    _preview,
    sha256_hex,
)
from .warm import anchors_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Assistant messages shorter than this (stripped) carry no evidence worth indexing.
MIN_ASSISTANT_CHARS = 40
MAX_COMMAND_CHARS = 500


def command_of(name: str, arguments: str) -> str:
    """A short human form of a tool call: the shell command for bash-like tools, else the tool
    with its path and short arguments (``Read /src/app.ts offset=10``)."""
    return call_fields(name, arguments).command[:MAX_COMMAND_CHARS]


# --------------------------------------------------------------------------- the store


class EvidenceStore(RestoreBodies):
    """Bodies and the compact blocks of one session."""

    def __init__(
        self,
        session: SessionStore,
        *,
        transcript_lookup: TranscriptLookup | None = None,
        offload_lookup: OffloadLookup | None = None,
        call_positions: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.session = session
        self.transcript_lookup = transcript_lookup
        self.offload_lookup = offload_lookup
        #: the session's calls by id -> position, as of now (stored with each document)
        self.call_positions = call_positions
        self._blocks: list[CompactBlock] | None = None
        #: event seq of each loaded block
        self._seqs: list[int] = []
        self._skipped = 0
        self._state: IndexState | None = None
        #: which pointers this writer knows to be indexed already (all of them when the state
        #: was computed from the blocks; else those it wrote or looked up)
        self._ords = Ords()
        #: tool call id -> what the call was about, for results whose call left the view earlier.
        self._calls: dict[str, CallFields] = {}
        #: body text of pointers made since the last block was appended (for the index)
        self._texts: dict[str, str] = {}

    # ----------------------------------------------------------------- bodies

    def archive_bytes(self, data: bytes) -> tuple[str, str]:
        """Store ``data`` once under its sha256; returns (its name, sha)."""
        sha = self.session.put_blob(data)
        return f"evidence/{sha[:2]}/{sha}.txt", sha

    def archive(self, text: str) -> tuple[str, str]:
        """Store ``text`` (UTF-8, byte-exact) once; returns (name, sha256)."""
        return self.archive_bytes(_encode(text))

    def _body_name(self, data: bytes, message_uuid: str | None, in_log: bool) -> tuple[str, str]:
        """The name and sha256 of a body. A body that is byte for byte the text of a message
        of the session's log is not stored again: the log holds it, and a restore reads it
        from there (checked against the sha256). Any other body is archived as a blob."""
        if in_log and message_uuid and self.transcript_lookup is not None:
            logged = self.transcript_lookup(message_uuid)
            if logged is not None and _encode(logged) == data:
                sha = sha256_hex(data)
                return f"evidence/{sha[:2]}/{sha}.txt", sha
        return self.archive_bytes(data)

    # ----------------------------------------------------------------- indexing

    def note_calls(self, messages: Sequence[Message]) -> None:
        """Remember the tool calls in ``messages`` (not indexed) so that results indexed later
        get their command: e.g. a result offloaded on arrival whose call is still in view."""
        for msg in messages:
            for call in msg.tool_calls:
                self._calls[call.id] = call_fields(call.name, call.arguments)

    def _pointer(
        self,
        *,
        text: str,
        data: bytes,
        role: str,
        seq: int,
        message_uuid: str | None,
        tool_use_id: str | None = None,
        tool_result_path: str | None = None,
        call: CallFields | None = None,
        source_scope: Literal["main_agent", "sub_agent"] = "main_agent",
        agent_run_id: str | None = None,
        parent_message_uuid: str | None = None,
        in_log: bool = False,
    ) -> EvidencePointer:
        rel, sha = self._body_name(data, message_uuid, in_log)
        command = call.command if call is not None else None
        key = "\x00".join(
            [source_scope, agent_run_id or "", message_uuid or "", tool_use_id or "", sha]
        )
        pointer_id = "ev-" + hashlib.sha256(_encode(key)).hexdigest()[:12]
        self._texts[pointer_id] = text
        return EvidencePointer(
            id=pointer_id,
            message_uuid=message_uuid,
            tool_use_id=tool_use_id,
            tool_result_path=tool_result_path,
            archived_tool_result_path=rel,
            source_scope=source_scope,
            agent_run_id=agent_run_id,
            parent_message_uuid=parent_message_uuid,
            content_types=classify(text, role),
            anchors=anchors_of(text, call),
            sha256=sha,
            chars=len(text),
            preview=_preview(text),
            command=command,
            tool_name=call.tool if call is not None else None,
            role=role,
            created_at=seq,
            paths=call.paths if call is not None else (),
            patterns=call.patterns if call is not None else (),
            urls=call.urls if call is not None else (),
            action=call.action if call is not None else None,
            lines=lines_text(call.lines) or None if call is not None else None,
            shell=call.shell if call is not None else False,
        )

    def _pointers_for(
        self,
        messages: Sequence[Message],
        offloaded: Mapping[str, OffloadInfo],
        seq: int,
        **scope: Any,
    ) -> list[EvidencePointer]:
        out: list[EvidencePointer] = []
        for msg in messages:
            if msg.role == "assistant":
                for tc in msg.tool_calls:
                    self._calls[tc.id] = call_fields(tc.name, tc.arguments)
                if len(msg.text.strip()) < MIN_ASSISTANT_CHARS:
                    continue
            elif msg.role not in ("tool", "user"):
                continue
            text = msg.text
            if msg.role == "user" and not strip_scaffolding(text):
                continue  # empty, or only an agent's reminders / environment context
            data = _encode(text)
            in_log = True  # the body is the message's own text (not an offloaded file's)
            tool_result_path: str | None = None
            call: CallFields | None = None
            if msg.role == "tool":
                call_id = msg.tool_call_id or ""
                call = self._calls.get(call_id)
                if call is not None and is_own_tool(call.tool):
                    continue  # contextfold's own tool results are views of evidence, not evidence
                info = offloaded.get(call_id) or offloaded.get(msg.uuid)
                if info is not None:
                    tool_result_path = str(info.path)
                    body = self._read_offloaded(info)
                    if body is not None:
                        data = body
                        text = _decode(body)
                        in_log = data == _encode(msg.text)
            seq += 1
            out.append(
                self._pointer(
                    text=text,
                    data=data,
                    role=msg.role,
                    seq=seq,
                    message_uuid=msg.uuid,
                    tool_use_id=msg.tool_call_id,
                    tool_result_path=tool_result_path,
                    call=call,
                    in_log=in_log and scope.get("source_scope", "main_agent") == "main_agent",
                    **scope,
                )
            )
        return out

    def build_compaction_block(
        self,
        *,
        messages: Sequence[Message],
        offloaded: Mapping[str, OffloadInfo],
        summary_items_source: Sequence[tuple[str, str]],
        token_before: int,
        token_after: int,
        boundary_uuid: str | None,
        natural_summary: str,
        tier: str,
        strategy: str,
        source_scope: Literal["main_agent", "sub_agent"] = "main_agent",
        agent_run_id: str | None = None,
        parent_message_uuid: str | None = None,
        known_calls: Sequence[Message] = (),
    ) -> CompactBlock:
        """The CompactBlock of the range of messages that just left the view, not appended
        yet (:meth:`append_block`; :meth:`index_compaction` does both).

        ``offloaded`` maps a tool call id (or a message uuid) to the file its full result was
        written to; that file's bytes become the evidence body. Tool results whose call is
        earlier in ``messages`` (or in an earlier call of this method, or in ``known_calls``,
        which is scanned for tool calls only) get the call's command.
        """
        self.note_calls(known_calls)
        state = self.state()
        seq = state.pointers + state.blocks
        pointers = self._pointers_for(
            messages,
            offloaded,
            seq,
            source_scope=source_scope,
            agent_run_id=agent_run_id,
            parent_message_uuid=parent_message_uuid,
        )
        items = link_summary_items(summary_items_source, pointers)
        block = CompactBlock(
            id=f"cb-{state.blocks + 1}",
            compact_boundary_uuid=boundary_uuid,
            token_before=token_before,
            token_after=token_after,
            natural_summary=natural_summary,
            summary_items=items,
            evidence=tuple(pointers),
            tier=tier,
            strategy=strategy,
            created_at=seq + len(pointers) + 1,
        )
        return block

    def index_compaction(self, **fields: Unpack[CompactionFields]) -> CompactBlock:
        """Index the range of messages that just left the view and append its CompactBlock
        (the arguments of :meth:`build_compaction_block`)."""
        block = self.build_compaction_block(**fields)
        self._append(block)
        return block

    def append_block(self, block: CompactBlock) -> None:
        """Append a block built by :meth:`build_compaction_block` (before any other block)."""
        self._append(block)

    def add_subagent_output(
        self,
        run_id: str,
        messages_or_text: str | Sequence[Message],
        parent_message_uuid: str | None = None,
    ) -> list[EvidencePointer]:
        """File a worker's transcript (or its plain-text output) under ``sourceScope=sub_agent``."""
        if not isinstance(run_id, str) or not run_id:
            raise UnsafeIdError(f"sub-agent run id must be a non-empty string, got {run_id!r}")
        state = self.state()
        seq = state.pointers + state.blocks
        if isinstance(messages_or_text, str):
            text = messages_or_text
            pointers = [
                self._pointer(
                    text=text,
                    data=_encode(text),
                    role="text",
                    seq=seq + 1,
                    message_uuid=None,
                    source_scope="sub_agent",
                    agent_run_id=run_id,
                    parent_message_uuid=parent_message_uuid,
                )
            ]
        else:
            pointers = self._pointers_for(
                messages_or_text,
                {},
                seq,
                source_scope="sub_agent",
                agent_run_id=run_id,
                parent_message_uuid=parent_message_uuid,
            )
        block = CompactBlock(
            id=f"cb-{state.blocks + 1}",
            compact_boundary_uuid=parent_message_uuid,
            natural_summary=f"Output of sub-agent run {run_id} ({len(pointers)} items).",
            evidence=tuple(pointers),
            tier="sub_agent",
            strategy="sub_agent",
            created_at=seq + len(pointers) + 1,
        )
        self._append(block)
        return pointers

    # ----------------------------------------------------------------- the blocks

    def _append(self, block: CompactBlock) -> None:
        """The block's event, its documents (with their exact keys), the session's new words
        and the updated index state: all in the current unit of work. A pointer indexed
        before (an output offloaded on arrival, then summarized) keeps its first document."""
        state = self.state()
        session = self.session
        if state.keyed:
            seed(self._ords, session.store, session.session_id, block)
        placed = self._ords.place(block)
        fresh = [p for p in block.evidence if p.id in placed and semantic.wanted_for(p)]
        texts = {p.id: self._texts.get(p.id, p.preview) for p in fresh}
        docs = search_docs(
            session.session_id,
            session.agent_id,
            block,
            lambda p: self._texts.pop(p.id, p.preview),
            ords=placed,
            block_seq=session.next_seq,
            positions=self.call_positions() if self.call_positions is not None else None,
        )
        self._texts.clear()
        seq = session.emit("evidence", {"block": block.to_dict()})
        session.index(docs)
        for p in block.evidence:
            if p.id in placed:
                session.put_doc(
                    STATE_NAMESPACE, pointer_key(session.session_id, p.id), {"pointer": p.to_dict()}
                )
        # the vectors are filed after the answer (nothing without the extra): store_vectors
        store_vectors.defer_block(session, block, texts, fresh)
        terms = block_terms(block)
        if terms:
            session.add_keys(NAMESPACE, {terms_id(session.session_id): terms})
        if not state.keyed and state.blocks:  # written before keys: filed by a backfill yet?
            state.keyed = IndexState.from_doc(self._state_doc()) is not None
        state.add_block(seq, block, placed, self._ords.calls)
        if state.keyed or state.blocks == 1:  # the first block starts a keyed session
            state.keyed = True
            session.put_doc(STATE_NAMESPACE, state_key(session.session_id), state.to_doc())
        if self._blocks is not None:
            self._blocks.append(block)
            self._seqs.append(seq)

    def indexed_calls(self, call_ids: Iterable[str]) -> set[str]:
        """Which of these tool calls have evidence already (stored, or indexed by this writer
        in the unit still open), without reading the blocks."""
        wanted = set(call_ids)
        state = self.state()  # a session written before keys: its blocks are read (once)
        found = {c for c in wanted if c in self._ords.by_call}
        rest = wanted - found
        if rest and state.keyed:
            rows = self.session.store.lookup(
                NAMESPACE,
                session_id=self.session.session_id,
                keys=[f"call:{c}" for c in rest if fits(f"call:{c}")],
            )
            found |= {key[5:] for key, _ in rows}
        return found

    def _state_doc(self) -> dict[str, Any] | None:
        return self.session.store.get_doc(STATE_NAMESPACE, state_key(self.session.session_id))

    def state(self) -> IndexState:
        """Counts of the session's blocks and pointers, read from the stored index state (and
        the blocks appended after it) without reading every block; computed from the blocks
        for a session written before the state existed (then ``keyed`` is False)."""
        if self._state is None:
            state = IndexState.from_doc(self._state_doc())
            if state is not None:
                for ev in self.session.read(start=state.seq + 1, kinds=["evidence"]):
                    block = ev.data.get("block")
                    if isinstance(block, dict):
                        state.fold(ev.seq, block)
                self._ords = Ords(state.calls)
            else:
                state, ords = IndexState(), Ords()
                for seq, numbered in self.numbered_blocks():
                    state.add_block(seq, numbered, ords.place(numbered), ords.calls)
                self._ords = ords
            self._state = state
        return self._state

    def _seqs_loaded(self) -> list[int]:
        self._load()
        return self._seqs

    def numbered_blocks(self) -> list[tuple[int, CompactBlock]]:
        """``(event seq, block)`` of every block, in order."""
        return list(zip(self._seqs_loaded(), self._load(), strict=True))

    def _load(self) -> list[CompactBlock]:
        if self._blocks is None:
            blocks: list[CompactBlock] = []
            seqs: list[int] = []
            for ev in self.session.read(kinds=["evidence"]):
                try:
                    blocks.append(CompactBlock.from_dict(ev.data["block"]))
                    seqs.append(ev.seq)
                except (KeyError, EvidenceFormatError, TypeError, ValueError):
                    self._skipped += 1
            self._blocks, self._seqs = blocks, seqs
        return self._blocks

    def blocks(self) -> list[CompactBlock]:
        """All blocks in order (read from the log once, then kept current)."""
        return list(self._load())

    @property
    def skipped_lines(self) -> int:
        return self._skipped

    def newest_created(self) -> int:
        """The largest ``created_at`` given so far (0 before any)."""
        return self.state().newest

    def pointers(self) -> list[EvidencePointer]:
        return [p for b in self.blocks() for p in b.evidence]

    def find(self, evidence_id: str) -> EvidencePointer | None:
        """The newest pointer with this id, or None."""
        found: EvidencePointer | None = None
        for p in self.pointers():
            if p.id == evidence_id:
                found = p
        return found


__all__ = [
    "NAMESPACE",
    "EvidenceStore",
    "OffloadInfo",
    "RestoredText",
    "command_key",
    "command_of",
    "link_summary_item",
    "search_docs",
    "summary_hints",
]
