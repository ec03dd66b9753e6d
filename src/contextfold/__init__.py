"""contextfold: keep long-running LLM agents inside their context window."""

from .errors import ContextFoldError
from .messages import Message, ToolCall

__all__ = ["ContextFoldError", "Message", "ToolCall"]
__version__ = "0.1.0"
