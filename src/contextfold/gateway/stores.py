"""The gateway's one store: which targets it accepts, opening it, and managers on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..compaction.summarizers.base import Summarizer
from ..engine.manager import ContextManager
from ..errors import ConfigError
from ..extras import needs_extra
from ..storage import SQLiteStore, Store, open_store
from ..storage.sqlite_write import SQLiteTransaction
from .config import GatewayConfig

DB_SCHEMES = ("postgresql://", "postgres://")
#: store documents: model -> the context limit an upstream overflow error stated
LEARNED = "gateway_learned_limits"


def is_database_url(store: str) -> bool:
    return store.startswith(DB_SCHEMES)


def check_store(store: str) -> None:
    """Fail early, with a clear message, for a store that cannot be opened here."""
    if is_database_url(store):
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError as exc:
            raise ConfigError(needs_extra("a PostgreSQL store", "postgres", exc)) from None
    elif "://" in store and not store.startswith(("sqlite:///", "memory://")):
        raise ConfigError(
            f"store must be a workspace folder or a postgresql:// URL, got {store.split('://')[0]}://"
        )


class SerialSQLiteStore(SQLiteStore):
    """A workspace store whose write transactions take turns within this process.

    A writer that finds the database locked sleeps in SQLite's busy handler (1, 2, 5, 10 ...
    ms per retry, whoever releases the lock): with tens of gateway threads appending at once,
    that convoy made the slowest appends wait hundreds of milliseconds. A lock hands the write
    over at once. Other processes writing to the workspace still meet SQLite's own lock."""

    def __init__(self, root: str | Path, *, fts5: bool | None = None) -> None:
        super().__init__(root, fts5=fts5)
        self._writing = threading.RLock()  # reentrant: a nested transaction joins the outer

    @contextmanager
    def transaction(self) -> Iterator[SQLiteTransaction]:
        with self._writing, super().transaction() as tx:
            yield tx


def open_shared_store(store: str) -> Store:
    """The one store every session of the gateway uses (a workspace folder, migrated from an
    earlier release's layout if needed, or a database URL)."""
    check_store(store)
    opened: Store
    if "://" not in store:
        opened = SerialSQLiteStore(Path(store))
    elif store.startswith("sqlite:///"):  # the database file's URL: its folder
        opened = SerialSQLiteStore(Path(store[len("sqlite:///") :]).parent)
    else:
        opened = open_store(store)
    if isinstance(opened, SQLiteStore):
        from ..engine.migrate import migrate_on_open

        try:
            migrate_on_open(opened)
        except BaseException:
            opened.close()
            raise
    return opened


def open_manager(
    config: GatewayConfig,
    store: Store,
    session_id: str,
    window: int,
    summarizer: Summarizer | None,
) -> ContextManager:
    return ContextManager(
        store=store,
        session_id=session_id,
        context_window=window,
        preset=config.preset,
        summarizer=summarizer,
        agent_id="gateway",
    )


__all__ = [
    "LEARNED",
    "SerialSQLiteStore",
    "check_store",
    "is_database_url",
    "open_manager",
    "open_shared_store",
]
