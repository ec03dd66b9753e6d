"""Evidence work filed after the answer: what a compaction left pending (the semantic vectors
of the outputs it removed, :mod:`contextfold.evidence.store_vectors`; the whole index of a long
first request, :mod:`contextfold.recovery.deferred`) computed and written off the request's
path. Every removed byte is recoverable before that (its pointer, sha256 and body
are written with the compaction); the pending work only adds how it is found by meaning."""

from __future__ import annotations

from collections.abc import Callable

from ..evidence.store_vectors import file_pending
from .context import SessionContext


def _never() -> bool:
    return False


def file_deferred(ctx: SessionContext, stop: Callable[[], bool] = _never) -> int:
    """File what the session's compactions left pending (committed records only; safe from any
    thread, without the session's lock; ``stop()`` gives up between chunks); how many vectors
    were filed."""
    return file_pending(ctx.store, ctx.session_id, stop)


def index_deferred(ctx: SessionContext, stop: Callable[[], bool] = _never) -> int:
    """Run the evidence indexing a long first request deferred past its answer (under the
    session's lock; ``stop()`` leaves the rest queued between jobs, see
    :mod:`contextfold.recovery.deferred`); how many jobs ran."""
    recovery = ctx.recovery
    with ctx.units.lock:
        return recovery.deferred.run(stop) if recovery.deferred.active else 0


__all__ = ["file_deferred", "index_deferred"]
