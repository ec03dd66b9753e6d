"""Files the agent wrote, named in every compaction message and every shortened tool call.

Knowing which files it changed is what an agent needs most after its history was folded
(and what reviewers check first), so the list is derived from the history itself - write and
edit tool calls, shell redirections, heredocs, ``sed -i`` (see :mod:`contextfold.core.shell`) -
instead of trusting a summary to mention every one. How far the history was scanned, and the
files found, are kept with the compactor state, so a reopened session goes on from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core.messages import Message
from ..core.shell import files_written
from ..jsontypes import JSON, JSONObject  # noqa: F401  (JSON resolves JSONObject at runtime)


def message_writes(msg: Message) -> list[str]:
    """Files the tool calls of one assistant message write, in order, without repeats."""
    out: list[str] = []
    for call in msg.tool_calls:
        for path in files_written(call.name, call.arguments):
            if path not in out:
                out.append(path)
    return out


class WrittenFiles:
    """Files written in history[:upto], in first-write order (incremental scan)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self._seen: set[str] = set()
        self.upto = 0
        self._owner: object | None = None

    def snapshot(self, owner: object) -> JSONObject | None:
        """What was scanned (kept with the compactor state: a reopened session does not scan
        its whole history again); None when the scan belongs to another view."""
        if owner is not self._owner or not self.upto:
            return None
        return {"files": list(self.files), "upto": self.upto}

    def restore(self, owner: object, data: Mapping[str, object]) -> None:
        files, upto = data.get("files"), data.get("upto")
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            return
        if isinstance(upto, bool) or not isinstance(upto, int) or upto < 0:
            return
        self.files, self._seen, self.upto, self._owner = list(files), set(files), upto, owner

    def scan(self, owner: object, history: Sequence[Message], end: int) -> list[str]:
        """Extend the scan to ``history[:end]``; ``owner`` (the view) resets it when replaced."""
        if owner is not self._owner:
            self.files, self._seen, self.upto, self._owner = [], set(), 0, owner
        for msg in history[self.upto : end]:
            if msg.role != "assistant" or not msg.tool_calls:
                continue
            for path in message_writes(msg):
                if path not in self._seen:
                    self._seen.add(path)
                    self.files.append(path)
        self.upto = max(self.upto, end)
        return self.files


def files_section(files: Sequence[str], max_chars: int) -> str:
    """The "Files written" section of a compaction message ("" when there are none): every
    file when they fit in ``max_chars``, else the newest that fit and how many are left out."""
    if not files:
        return ""
    shown: list[str] = []
    used = 0
    for path in reversed(files):
        if shown and used + len(path) + 2 > max_chars:
            break
        shown.insert(0, path)
        used += len(path) + 2
    more = len(files) - len(shown)
    lead = f"(+{more} earlier, in the compaction records) " if more else ""
    return "\n\n## Files written so far\n" + lead + ", ".join(shown)
