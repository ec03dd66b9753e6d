"""contextfold: keep long-running LLM agents inside their context window."""

from .config import ContextConfig, harness, progressive
from .errors import ContextFoldError, ContextOverflowError
from .manager import ContextManager
from .messages import Message, ToolCall
from .records import CompactionRecord, Tier

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
