"""Opening a session: the store, then every in-memory part rebuilt from what is stored."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..compaction.offload import EVICTION_POLICY, INGEST_POLICY, OffloadPolicy, OffloadStore
from ..compaction.pipeline import preset_stages
from ..compaction.progressive import ProgressiveCompactor
from ..compaction.stages import Stage
from ..compaction.summarizers.base import Summarizer
from ..core.config import ContextConfig, TierConfig, resolve_preset
from ..core.paths import Workspace
from ..core.records import StoreRecordStore
from ..core.tokens import Calibration, MessageTokenCache, TokenCounter
from ..core.units import Units
from ..core.view import HistoryView
from ..errors import ConfigError, StorageError
from ..recovery.hooks import Recovery
from ..recovery.sessions.log import SessionLog
from ..storage import ENV_VAR, SQLiteStore, Store, open_store
from ..storage.session import SessionStore
from . import filing, reopen
from .context import SessionContext
from .state import SessionState

DEFAULT_WORKSPACE = "./.contextfold"


def check_settings(
    context_window: object,
    workspace: str | Path | None,
    store: Store | str | Path | None,
    preset: str | ContextConfig | None,
    config: ContextConfig | None,
) -> ContextConfig:
    """The arguments of a session's owner checked before anything is opened; the config to
    use (``config``, else the ``preset``'s)."""
    if not isinstance(context_window, int) or context_window <= 0:
        raise ConfigError(f"context_window must be a positive integer, got {context_window!r}")
    if config is not None and preset is not None:
        raise ConfigError("pass either preset or config, not both")
    if workspace is not None and store is not None:
        raise ConfigError("pass either workspace (a folder) or store, not both")
    return config or resolve_preset(preset)


def open_session_store(
    workspace: str | Path | None, store: Store | str | Path | None
) -> tuple[Store, bool]:
    """The store to use and whether it was opened here (then the caller closes it): a Store
    as given, else a URL or folder (``workspace``, ``$CONTEXTFOLD_STORE``, the default
    folder). A folder written by an older release is migrated on first open."""
    if store is not None and not isinstance(store, str | Path):
        return store, False
    target = store if store is not None else workspace
    if target is None:
        target = os.environ.get(ENV_VAR) or DEFAULT_WORKSPACE
    if isinstance(target, str) and "://" not in target:
        target = Path(target)
    opened = open_store(target)
    if isinstance(opened, SQLiteStore):
        from .migrate import migrate_on_open

        try:
            migrate_on_open(opened)
        except BaseException:
            opened.close()
            raise
    return opened, True


def offload_policies(config: ContextConfig) -> dict[str, OffloadPolicy]:
    """The offload policies applied when a tool result arrives (ingest, eviction)."""
    out: dict[str, OffloadPolicy] = {}
    if config.ingest_offload_chars:
        out["ingest"] = replace(INGEST_POLICY, threshold=config.ingest_offload_chars)
    ev = config.eviction
    if ev is not None:
        out["eviction"] = replace(
            EVICTION_POLICY,
            threshold=ev.max_chars,
            head_chars=ev.head_chars,
            tail_chars=ev.tail_chars,
            exclude_tools=tuple(ev.exclude_tools),
        )
    return out


def build_context(
    *,
    config: ContextConfig,
    store: Store,
    session_id: str,
    agent_id: str,
    units: Units,
    counter: TokenCounter,
    summarizer: Summarizer | None,
    share_memory: bool,
    window: int,
    fact_extractor: object = None,
    stages: Sequence[Stage] | None = None,
) -> SessionContext:
    """A session's context with its settings (:func:`reset` builds its parts)."""
    root = store.root if isinstance(store, SQLiteStore) else None
    return SessionContext(
        config=config,
        session_id=session_id,
        agent_id=agent_id,
        store=store,
        workspace=Workspace.at(root) if root is not None else None,
        units=units,
        counter=counter,
        summarizer=summarizer,
        share_memory=share_memory,
        configured_window=window,
        fact_extractor=fact_extractor,
        stages=list(stages) if stages is not None else None,
    )


def reset(ctx: SessionContext) -> None:
    """(Re)build every in-memory part of ``ctx`` from what is stored. The problems recovery
    noted so far are kept."""
    config, session_id = ctx.config, ctx.session_id
    problems = ctx.recovery.problems if hasattr(ctx, "recovery") else []
    ctx.session = session = SessionStore(ctx.store, session_id, ctx.agent_id)
    ctx.cache = MessageTokenCache(ctx.counter)
    ctx.calibration = Calibration()
    ctx.learned_window = None
    ctx.window = ctx.configured_window
    ctx.log = SessionLog(session)
    ctx.offload = OffloadStore(session)
    ev = config.eviction
    ctx.eviction_store = (
        OffloadStore(session, root=Path(ev.offload_root) / session_id, name="offload_root")
        if ev is not None and ev.offload_root is not None
        else ctx.offload
    )
    ctx.record_store = StoreRecordStore(session)
    ctx.view = HistoryView(ctx.cache.count)
    ctx.compactor = _compactor(ctx)
    ctx.recovery = Recovery(
        ctx,
        fact_extractor=ctx.fact_extractor,
        view_tokens=lambda: ctx.compactor.view_tokens(),
        compactions=lambda: ctx.compactor.state.compactions,
    )
    ctx.recovery.problems = problems
    ctx.recovery.index_before = lambda sid, agents: filing.run_queued(
        ctx.store, None if sid is None else [sid], skip=ctx.session_id, agent_ids=agents
    )
    ctx.compactor.before_summarize = ctx.recovery.before_summarize
    ctx.compactor.index_range = ctx.recovery.index_range
    ctx.last_record = None
    ctx.last_prepare = None
    ctx.last_estimate = 0
    ctx.last_fixed = 0
    ctx.last_prefix = ctx.last_schema = ctx.last_injection = 0
    ctx.room = ctx.window
    ctx.session_state = SessionState()
    reopen.load(ctx)


def delete_session(ctx: SessionContext) -> None:
    """Cascade cleanup: the session's events, documents and index rows in one step, the
    evicted files under a custom offload root; then the session starts again empty."""
    ctx.recovery.forget_session()
    ctx.store.delete_session(ctx.session_id)
    root = ctx.eviction_store.root
    if ctx.eviction_store is not ctx.offload and root is not None and root.exists():
        try:
            shutil.rmtree(root)
        except OSError as exc:
            raise StorageError(f"cannot delete {root}: {exc}") from exc
    reset(ctx)


def _compactor(ctx: SessionContext) -> ProgressiveCompactor:
    config = ctx.config
    compactor = ProgressiveCompactor(
        view=ctx.view,
        window=ctx.window,
        config=config.tiers or TierConfig(),
        session_id=ctx.session_id,
        count_text=ctx.counter.count_text,
        summarizer=ctx.summarizer,
        offload=ctx.offload,
        record_store=ctx.record_store,
        truncate_args=config.truncate_args,
        summary_style=config.summary_style,
        summary_prompt=config.summary.summary_prompt if config.summary else None,
        scale=ctx.calibration.apply,
        scale_fixed=ctx.calibration.apply_fixed,
        active_tasks=lambda: ctx.session_state.active_task_lines(),
        policies=offload_policies(config),
        stages=ctx.stages if ctx.stages is not None else preset_stages(config.preset),
    )
    if ctx.eviction_store is not ctx.offload:
        compactor.extra_stores.append(ctx.eviction_store)
    return compactor


__all__ = [
    "DEFAULT_WORKSPACE",
    "build_context",
    "check_settings",
    "delete_session",
    "offload_policies",
    "open_session_store",
    "reset",
]
