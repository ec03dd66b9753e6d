"""Raw session logs, their search index and the session_* agent tools (seed 002, section 5)."""

from .index import SearchHit, SessionIndex, fts5_available
from .log import LogEntry, SessionLog, SessionMeta, list_session_ids, read_meta
from .tools import session_tools

__all__ = [
    "LogEntry",
    "SearchHit",
    "SessionIndex",
    "SessionLog",
    "SessionMeta",
    "fts5_available",
    "list_session_ids",
    "read_meta",
    "session_tools",
]
