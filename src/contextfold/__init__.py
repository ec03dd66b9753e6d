"""contextfold: keep long-running LLM agents inside their context window.

The names below are imported on first use, so that ``import contextfold`` (and the
``contextfold`` command's start-up) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import ContextConfig, harness, progressive
    from .errors import ContextFoldError, ContextOverflowError
    from .manager import ContextManager
    from .messages import Message, ToolCall
    from .records import CompactionRecord, Tier

#: public name -> the module that defines it
_LAZY = {
    "CompactionRecord": ".records",
    "ContextConfig": ".config",
    "ContextFoldError": ".errors",
    "ContextManager": ".manager",
    "ContextOverflowError": ".errors",
    "Message": ".messages",
    "Tier": ".records",
    "ToolCall": ".messages",
    "harness": ".config",
    "progressive": ".config",
}

__all__ = [
    "CompactionRecord",
    "ContextConfig",
    "ContextFoldError",
    "ContextManager",
    "ContextOverflowError",
    "Message",
    "Tier",
    "ToolCall",
    "harness",
    "progressive",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextfold' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
