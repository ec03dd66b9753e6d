"""One exception root for everything contextfold raises on purpose."""

from __future__ import annotations

from typing import Protocol


class RecoveryRecord(Protocol):
    """What an overflow error tells of its recovery attempt (a ``CompactionRecord``)."""

    @property
    def id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def tokens_before(self) -> int: ...
    @property
    def tokens_after(self) -> int: ...
    @property
    def error(self) -> str: ...


class ContextFoldError(Exception):
    """Root of every error raised by contextfold."""


class ConfigError(ContextFoldError, ValueError):
    """A configuration value is invalid; raised when the config is built."""


class InvalidMessageError(ContextFoldError, ValueError):
    """A message (or a list of them) is malformed.

    ``index`` is the position of the offending message in the input, when known.
    """

    def __init__(self, problem: str, *, index: int | None = None) -> None:
        self.index = index
        self.problem = problem
        where = f"message {index}: " if index is not None else ""
        super().__init__(f"{where}{problem}")


class UnsafeIdError(ContextFoldError, ValueError):
    """An id (session, tool call, agent) cannot be used as a file name safely."""


class StorageError(ContextFoldError, OSError):
    """Reading or writing the workspace failed."""


class SummarizerError(ContextFoldError, RuntimeError):
    """A summarizer (LLM or other) failed to produce a summary."""


class ToolArgumentsError(ContextFoldError, ValueError):
    """An agent tool was called with bad arguments."""


class ContextOverflowError(ContextFoldError, RuntimeError):
    """The model rejected the request as too long, even after recovery.

    ``record`` carries the CompactionRecord of the recovery attempt (typed here by the
    :class:`RecoveryRecord` protocol, so that this module imports nothing of the package).
    """

    def __init__(
        self,
        message: str,
        *,
        record: RecoveryRecord | None = None,
        cause: BaseException | None = None,
    ):
        super().__init__(message)
        self.record = record
        self.cause = cause


__all__ = [
    "ConfigError",
    "ContextFoldError",
    "ContextOverflowError",
    "InvalidMessageError",
    "StorageError",
    "SummarizerError",
    "ToolArgumentsError",
    "UnsafeIdError",
]
