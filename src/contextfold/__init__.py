"""contextfold: keep long-running LLM agents inside their context window.

The names below are imported on first use, so that ``import contextfold`` (and the
``contextfold`` command's start-up) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core.config import ContextConfig, harness, progressive
    from .core.messages import Message, ToolCall
    from .core.records import CompactionRecord, Tier
    from .engine.manager import ContextManager
    from .errors import ContextFoldError, ContextOverflowError

#: public name -> the module that defines it
_LAZY = {
    "CompactionRecord": ".core.records",
    "ContextConfig": ".core.config",
    "ContextFoldError": ".errors",
    "ContextManager": ".engine.manager",
    "ContextOverflowError": ".errors",
    "Message": ".core.messages",
    "Tier": ".core.records",
    "ToolCall": ".core.messages",
    "harness": ".core.config",
    "progressive": ".core.config",
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
