"""A store filled by replaying a bundled trajectory, for the inspector's tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold import ContextManager
from contextfold.storage import Store
from tests.conftest import TRACES_DIR, load_trace

#: a short real trajectory that compacts several times at this window
TRACE = "deepseek__output_deepseek_chat_dev_sqlfluff__sqlfluff-2419_sqlfluff__sqlfluff-2419.json"
WINDOW = 8000
SESSION = "sqlfluff-2419"


@dataclass
class Replayed:
    folder: Path
    session_id: str
    messages: list[dict[str, Any]]
    calls: int


def replay(folder: Path | Store, session_id: str = SESSION) -> Replayed:
    """Replay the trajectory as an agent loop would: ``prepare`` before each model call (into
    a workspace folder, or an open store)."""
    messages = load_trace(TRACES_DIR / TRACE)
    calls = 0
    store = str(folder) if isinstance(folder, Path) else folder
    with ContextManager(store=store, session_id=session_id, context_window=WINDOW) as cm:
        for i, msg in enumerate(messages):
            if msg.get("role") == "assistant" and i > 0:
                cm.prepare()
                calls += 1
            cm.add(msg)
    where = folder if isinstance(folder, Path) else Path(".")
    return Replayed(folder=where, session_id=session_id, messages=messages, calls=calls)
