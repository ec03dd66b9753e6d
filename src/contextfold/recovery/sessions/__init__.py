"""Raw session logs, search over them and the session_* agent tools."""

from .index import SearchHit, SessionIndex
from .log import LogEntry, SessionLog, SessionMeta, read_entries
from .tools import session_tools

__all__ = [
    "LogEntry",
    "SearchHit",
    "SessionIndex",
    "SessionLog",
    "SessionMeta",
    "read_entries",
    "session_tools",
]
