"""The session context: everything one session's engine works on, in one object.

A :class:`SessionContext` holds the parts of one open session (the view over its history,
the event log, the offload and evidence stores, the compaction records, the token counter,
the window and its calibration, the configuration). The modules of the engine (opening,
ingest, prepare, overflow handling) and the recovery hooks receive it; none of them sees the
:class:`~contextfold.ContextManager` facade, which owns the lock and the units of work and
hands them in through the small :class:`~contextfold.core.units.Units` protocol.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..compaction.offload import OffloadStore
from ..compaction.progressive import ProgressiveCompactor
from ..compaction.stages import Stage
from ..compaction.summarizers.base import Summarizer
from ..core.config import ContextConfig
from ..core.messages import Message, stable_uuid
from ..core.paths import Workspace
from ..core.records import CompactionRecord, OffloadEntry, StoreRecordStore
from ..core.tokens import Calibration, MessageTokenCache, TokenCounter, count_tools
from ..core.units import Units
from ..core.view import HistoryView
from ..errors import ConfigError
from ..providers.limits import LearnedWindow
from ..recovery.hooks import Recovery
from ..recovery.sessions.log import SessionLog, entry_of
from ..storage import Store
from ..storage.session import SessionStore
from .state import SessionState

#: The offloads of a lazily reopened history applied when their message is loaded.
Deferred = list[tuple[int, OffloadEntry, str]]


@dataclass(kw_only=True, eq=False)
class SessionContext:
    """One open session: the parts every engine step reads and changes.

    The settings are given once; the parts below them are (re)built from the store by
    :func:`contextfold.engine.opening.reset` - in place, so whoever holds the context keeps
    seeing the session after a reload."""

    config: ContextConfig
    session_id: str
    agent_id: str
    store: Store
    workspace: Workspace | None
    units: Units
    counter: TokenCounter
    summarizer: Summarizer | None
    share_memory: bool
    #: The window as configured (``context_window``).
    configured_window: int
    #: ``fact_extractor=`` as given (resolved by the recovery)
    fact_extractor: object = None
    #: ``stages=`` as given: the stages of a tier run (None: the preset's)
    stages: Sequence[Stage] | None = None
    #: tokens of each set of tool schemas seen (by their JSON)
    tool_tokens: dict[str, int] = field(default_factory=dict)

    # ---- rebuilt on every (re)open
    #: The window in use: ``configured_window``, or lower once an overflow error stated less.
    window: int = field(init=False)
    learned_window: LearnedWindow | None = field(init=False, default=None)
    session: SessionStore = field(init=False)
    log: SessionLog = field(init=False)
    cache: MessageTokenCache = field(init=False)
    calibration: Calibration = field(init=False)
    offload: OffloadStore = field(init=False)
    #: where eviction writes (a custom offload root), else ``offload`` itself
    eviction_store: OffloadStore = field(init=False)
    record_store: StoreRecordStore = field(init=False)
    view: HistoryView = field(init=False)
    compactor: ProgressiveCompactor = field(init=False)
    recovery: Recovery = field(init=False)
    session_state: SessionState = field(init=False)
    #: The last compaction that changed the view (None until one did).
    last_record: CompactionRecord | None = field(init=False, default=None)
    #: The record of the last prepare()/compact(), including "no compaction needed".
    last_prepare: CompactionRecord | None = field(init=False, default=None)
    #: view tokens of the last prepare() (what calibration compares the provider's count to)
    last_estimate: int = field(init=False, default=0)
    #: tokens of the last call besides its messages (tool schemas calibrated, injection)
    last_fixed: int = field(init=False, default=0)
    #: uncalibrated tokens of the last call's leading system messages, tool schemas and
    #: injected evidence (calibration compares each part apart)
    last_prefix: int = field(init=False, default=0)
    last_schema: int = field(init=False, default=0)
    last_injection: int = field(init=False, default=0)
    #: window minus the last view (with schemas and output reserve): room for evidence
    room: int = field(init=False, default=0)
    #: event seq of each history position (a lazily reopened session; else None)
    seqs: list[int] | None = field(init=False, default=None)
    #: offloads of messages not loaded yet: (position, entry, policy), applied on load
    deferred: Deferred = field(init=False, default_factory=list)

    # ------------------------------------------------------------------ small helpers
    def uuid_for(self, position: int) -> str:
        """The uuid of a message given without one: derived from (session, position), so the
        same history always gives the same view (evidence ids derive from it)."""
        return stable_uuid(f"contextfold:{self.session_id}:{position}")

    def stores(self) -> list[OffloadStore]:
        """The offload stores in use (the eviction store when it is a separate one)."""
        if self.eviction_store is self.offload:
            return [self.offload]
        return [self.offload, self.eviction_store]

    def offload_entries(self) -> dict[str, OffloadEntry]:
        """Every offload entry of the session, of both stores."""
        entries = self.offload.entries()
        if self.eviction_store is not self.offload:
            entries.update(self.eviction_store.entries())
        return entries

    def set_window(self, learned: LearnedWindow | None) -> None:
        """Use ``learned`` (a window an overflow error stated) or, for None, the configured
        window again."""
        self.learned_window = learned
        window = self.configured_window
        if learned is not None:
            window = min(window, learned.window)
        self.window = window
        self.compactor.window = window

    def message_at(self, index: int) -> Message:
        """History message ``index`` without loading the rest of a lazily reopened history."""
        if self.view.is_loaded(index) or self.seqs is None:
            return self.view.history[index]
        seq = self.seqs[index]
        for event in self.store.read(self.session_id, start=seq, stop=seq + 1):
            return entry_of(event).message
        return self.view.history[index]

    def schema_tokens(self, tools: Sequence[Mapping[str, object]] | None) -> int:
        """Tokens of the tool schemas sent with the messages (calibrated like the system
        prompt: see :class:`~contextfold.core.tokens.Calibration`)."""
        return self.calibration.apply_fixed(self.raw_schema_tokens(tools))

    def raw_schema_tokens(self, tools: Sequence[Mapping[str, object]] | None) -> int:
        """Uncalibrated tokens of the tool schemas (cached per set of schemas)."""
        if not tools:
            return 0
        if isinstance(tools, str | bytes) or not all(isinstance(t, Mapping) for t in tools):
            raise ConfigError("tools must be a list of tool schemas (dicts)")
        key = json.dumps(tools, sort_keys=True, default=str)
        if key not in self.tool_tokens:
            self.tool_tokens[key] = count_tools(self.counter, tools)
        return self.tool_tokens[key]

    def extra_tokens(self, tools: Sequence[Mapping[str, object]] | None) -> int:
        """What a call adds to the view: the reserve for the answer and the tool schemas."""
        return self.config.reserve_output_tokens + self.schema_tokens(tools)

    def bind_calibration(self, calibration: Calibration) -> None:
        """Use ``calibration`` from now on (the compactor measures with it too)."""
        self.calibration = calibration
        self.compactor.scale = calibration.apply
        self.compactor.scale_fixed = calibration.apply_fixed

    def save_calibration(self) -> None:
        self.session.put_doc(
            "calibration", f"{self.session_id}/calibration", self.calibration.to_dict()
        )


__all__ = ["Deferred", "SessionContext"]
