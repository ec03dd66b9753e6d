"""The session every agent test plays, independent of the wire format.

A plan is a list of steps the scripted model asks the agent to take (inspect, read, edit, then
many noisy build runs), and a follow-up question about the *first* failing run, asked after its
output has long left the verbatim view. The scripts of each provider turn a step into that
agent's own tool call (or text format) and find where they are from the ids of the tool results
they get back, so a retried or compacted request never confuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.agents.harness import FIRST_FAILING, marker

TASK = (
    "Fix the off-by-one in app.py, then run the build steps `python3 run.py K` for every K "
    "I ask and tell me when all of them ran."
)
FOLLOWUP = "What was the exact error of the first failing run? Quote the error line."
DONE = "All build steps ran; app.py is fixed."


def first_error() -> str:
    """The line the follow-up must get back: the first failing run's error."""
    return f"ValueError: run {FIRST_FAILING} failed: checksum mismatch {marker(FIRST_FAILING)}"


def recall_query() -> str:
    return "error of the first failing run: ValueError checksum mismatch traceback"


@dataclass(frozen=True)
class Step:
    kind: str  # "shell", "read", "edit"
    command: str = ""
    path: str = ""
    old: str = ""
    new: str = ""


@dataclass
class Plan:
    """``runs`` build runs of ``kb`` kilobytes of output each, every fourth one ``big_kb`` (past
    the gateway's offload threshold, so both verbatim compaction and offload are exercised)."""

    runs: int
    kb: int = 8
    big_kb: int = 26
    steps: list[Step] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.steps = [
            Step("shell", command="ls && echo started > progress.txt"),
            Step("read", path="app.py"),
            Step("edit", path="app.py", old="sum(values) + 1", new="sum(values)"),
            *(
                Step("shell", command=f"python3 run.py {k} {self.size(k)}")
                for k in range(self.runs)
            ),
        ]

    def size(self, k: int) -> int:
        return self.big_kb if k % 4 == 3 else self.kb

    @property
    def output_chars(self) -> int:
        """About how many characters of tool output the session produces."""
        return sum(self.size(k) for k in range(self.runs)) * 1000
