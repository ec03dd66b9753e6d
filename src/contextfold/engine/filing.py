"""Evidence work filed after the answer: what a compaction left pending (the semantic vectors
of the outputs it removed, :mod:`contextfold.evidence.store_vectors`; the whole index of a long
first request, :mod:`contextfold.recovery.deferred`) computed and written off the request's
path. Every removed byte is recoverable before that (its pointer, sha256 and body
are written with the compaction); the pending work only adds how it is found by meaning."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from ..errors import ContextFoldError
from ..evidence.store_vectors import TextEncoder, file_pending
from ..recovery.deferred import NAMESPACE as DEFERRED
from ..storage import Store
from ..storage.base import ConcurrentWriteError
from .context import SessionContext

log = logging.getLogger(__name__)


def _never() -> bool:
    return False


def file_deferred(
    ctx: SessionContext, stop: Callable[[], bool] = _never, encoder: TextEncoder | None = None
) -> int:
    """File what the session's compactions left pending (committed records only; safe from any
    thread, without the session's lock; ``stop()`` gives up between chunks; ``encoder``
    computes the vectors, None: the model in this process); how many vectors were filed."""
    return file_pending(ctx.store, ctx.session_id, stop, encoder)


def index_deferred(ctx: SessionContext, stop: Callable[[], bool] | None = None) -> int:
    """Run the evidence indexing a long first request deferred past its answer (under the
    session's lock). ``stop()``: the work gives way to requests (checked between units of
    work, the rest left queued, long jobs of rows written in parts, see
    :mod:`contextfold.recovery.deferred`); None: everything now. How many jobs ran."""
    recovery = ctx.recovery
    with ctx.units.lock:
        return recovery.deferred.run(stop) if recovery.deferred.active else 0


def queued_sessions(store: Store, session_ids: Iterable[str] | None = None) -> list[str]:
    """The sessions among ``session_ids`` (None: every session) with indexing jobs queued."""
    if session_ids is None:
        keys = store.docs(DEFERRED)
        return sorted({k.partition("/")[0] for k in keys})
    return [s for s in session_ids if store.docs(DEFERRED, prefix=f"{s}/")]


def run_queued(
    store: Store,
    session_ids: Iterable[str] | None = None,
    *,
    skip: str | None = None,
    agent_ids: Sequence[str] | None = None,
) -> int:
    """Run the queued indexing jobs of ``session_ids`` (None: every session) for a reader
    without a session manager of its own (the workspace tools, a search across sessions), the
    way the session's manager runs them, so what it reads is what indexing at once gives.
    ``agent_ids``: only the sessions of these agents (what the reader may search; None: any).
    A session whose writer commits meanwhile is left to that writer (it runs the jobs itself);
    a session whose jobs fail (the store down, a damaged job) is read as it is, the failure
    logged. A read-only store is left as it is, and so is ``skip`` (the caller's own session,
    whose manager runs its jobs itself). How many jobs ran."""
    if getattr(store, "read_only", False):
        return 0
    from .manager import ContextManager

    done = 0
    for sid in queued_sessions(store, session_ids):
        info = store.session(sid) if sid != skip else None
        if info is None or (agent_ids is not None and info.agent_id not in agent_ids):
            continue
        try:
            cm = ContextManager(store=store, session_id=sid, agent_id=info.agent_id)
        except ContextFoldError as exc:
            log.warning("session %s: its queued index jobs did not run (%s)", sid, exc)
            continue
        try:
            done += index_deferred(cm.context)
        except ConcurrentWriteError:
            continue
        except ContextFoldError as exc:  # fails open: the reader reads what is indexed
            log.warning("session %s: its queued index jobs did not run (%s)", sid, exc)
        finally:
            cm.close()
    return done


__all__ = ["file_deferred", "index_deferred", "queued_sessions", "run_queued"]
