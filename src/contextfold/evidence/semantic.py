"""Optional semantic retrieval: a sentence vector per piece of evidence, for paraphrases.

With the ``semantic`` extra installed (the all-MiniLM-L6-v2 model in a registry package, run on
numpy by :mod:`.embed`), every output indexed gets a vector of what it is (its command and the
head of its text), written with its block in the same unit of work, into the store's own
document table (namespace ``evidence-vectors``, one document per block, key
``<session>/<block>``: removed with the session, the same on every backend, no schema change).

A question consults the vectors only when its words do not already say what it wants: no kind
of output understood, no command, URL, pattern or error type named (:func:`wanted`). Then the
cosine of the question against each output is one more ranking signal next to BM25 and the
names matched (:mod:`.rank`), and the best semantic matches join the candidates when nothing
was named at all. Without the extra nothing is imported and nothing is written; setting
``CONTEXTFOLD_SEMANTIC=0`` turns it off with the extra installed (the recall bench compares
both). Deterministic: each text is encoded alone, vectors are stored as float16.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from . import embed
from .fields import is_own_tool
from .model import CompactBlock, EvidencePointer

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ..storage.session import SessionStore
    from .qdocs import Found
    from .rank import QuerySpec

    #: one vector (as :meth:`.embed.Encoder.encode` gives them)
    Vector = np.ndarray[tuple[int], np.dtype[np.float32]]

log = logging.getLogger(__name__)

NAMESPACE = "evidence-vectors"
#: Characters of an output's text read for its vector (the model reads MAX_TOKENS tokens).
TEXT_CHARS = 600
#: Best semantic matches added as candidates when the question names nothing ...
CANDIDATES = 8
#: ... each at least this near the question (a question about nothing that was done, or
#: nonsense, stays below it: it finds nothing rather than the least far output).
SIM_FLOOR = 0.25
_OFF = ("0", "off", "false", "no")
#: What computing vectors has cost in this process (read by the recall bench).
STATS = {"vectors": 0, "seconds": 0.0, "query_seconds": 0.0}


def enabled() -> bool:
    """The extra is installed and not turned off (``CONTEXTFOLD_SEMANTIC=0``)."""
    if os.environ.get("CONTEXTFOLD_SEMANTIC", "").strip().lower() in _OFF:
        return False
    return embed.available()


#: What each kind of output is (:data:`.understand.KINDS`), and outputs of no such kind
#: (None): a question nearest to one of these in meaning asks for that kind.
MEANINGS: tuple[tuple[str | None, str], ...] = (
    ("read", "the contents of a file as it was opened and displayed"),
    ("read", "the source code of a file you looked at"),
    ("run", "the output a program or script printed when it was executed"),
    ("run", "what came out of running a script"),
    ("traceback", "the exception and the stack of calls when a program crashed"),
    ("traceback", "the error a program failed with"),
    ("tests", "the results of the test suite: which tests passed and which failed"),
    ("tests", "the outcome of running the unit tests"),
    ("search", "the matching lines found by searching the code for a pattern"),
    ("search", "where in the files a name appears"),
    ("diff", "the changes made to the source files, as a patch"),
    ("diff", "the modifications to the code"),
    (None, "the names of the files and folders in a directory listing"),
    (None, "the warnings a linter or style checker reported"),
    (None, "the log of installing packages"),
    (None, "the response to a web request"),
    (None, "a count of lines, words or bytes"),
)
#: A kind is taken when the question is at least this near its meaning ...
KIND_FLOOR = 0.25
#: ... and this much nearer than to any other kind's.
KIND_MARGIN = 0.04
#: Said in ``recall``'s explanation of a hit whose kind the vectors chose.
BECAUSE = "semantic match"


def english(text: str) -> bool:
    """The model knows English only: a question in Chinese (or any CJK text) is not asked of it."""
    return not any("\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" for ch in text)


def kind_wanted(spec: QuerySpec, quoted: Sequence[str], f: Found) -> bool:
    """Whether the kind of output asked for is read from the question's meaning: its words
    say neither the kind nor a command, tool, URL, pattern or error type (an ordinal alone
    may count the outputs of the kind the meaning says, unless it counts failures)."""
    if spec.kind is not None:
        return False
    if f.bulk(spec) and (spec.wants_error or spec.wants_failing):
        return False  # "the first failing command": counted over the failing outputs
    if quoted or spec.tools or spec.exceptions or spec.urls:
        return False
    if f.exact or f.partial or f.url_docs or f.exc_docs:
        return False
    return not (f.pattern_docs and not spec.paths)


def wanted(spec: QuerySpec, quoted: Sequence[str], f: Found) -> bool:
    """Whether a question needs the vectors: its words say neither the kind of output (or
    the vectors said it) nor a command, tool, URL, pattern or error type (a file named alone
    still leaves open which of its outputs: its content, a run of it), and it is no ordinal
    over every output."""
    if spec.kind is not None and spec.kind_because != BECAUSE:
        return False
    if quoted or spec.tools or spec.exceptions or spec.urls:
        return False
    if f.exact or f.partial or f.url_docs or f.exc_docs:
        return False
    if f.pattern_docs and not spec.paths:  # (a file named is also a search pattern's words)
        return False
    return not f.bulk(spec)


class Meanings:
    """The vectors of :data:`MEANINGS`, computed once per process."""

    _matrix: ClassVar[list[NDArray[np.float32]]] = []

    @classmethod
    def kind_of(cls, q: Vector) -> str | None:
        """The kind whose meaning the question vector ``q`` is nearest (None: no kind, or
        not clearly one)."""
        enc = embed.encoder()
        if enc is None:
            return None
        if not cls._matrix:
            cls._matrix.append(enc.encode([m for _, m in MEANINGS]))
        sims = cls._matrix[0] @ q
        best: dict[str | None, float] = {}
        for (kind, _), s in zip(MEANINGS, sims):
            best[kind] = max(best.get(kind, -1.0), float(s))
        ranked = sorted(best.items(), key=lambda kv: -kv[1])
        (kind, top), (_, second) = ranked[0], ranked[1]
        return kind if top >= KIND_FLOOR and top - second >= KIND_MARGIN else None


def wanted_for(p: EvidencePointer) -> bool:
    """Outputs get a vector: tool results (not contextfold's own) and sub-agents' reports;
    messages are found by their words."""
    if p.source_scope == "sub_agent":
        return True
    return p.role == "tool" and not is_own_tool(p.tool_name)


#: What a program does, in the words of its manual's NAME line (or its own --help): the
#: model knows English, not what ``wc`` or ``flake8`` is.
GLOSS = {
    "ls": "list directory contents",
    "tree": "list contents of directories in a tree-like format",
    "cat": "concatenate files and print on the standard output",
    "nl": "number lines of files",
    "head": "output the first part of files",
    "tail": "output the last part of files",
    "sed": "stream editor for filtering and transforming text",
    "awk": "pattern scanning and text processing language",
    "grep": "print lines that match patterns",
    "rg": "recursively search the current directory for lines matching a pattern",
    "find": "search for files in a directory hierarchy",
    "wc": "print newline, word, and byte counts for each file",
    "diff": "compare files line by line",
    "patch": "apply a diff file to an original",
    "git diff": "show changes between commits, commit and working tree",
    "git status": "show the working tree status",
    "git log": "show commit logs",
    "git show": "show various types of objects",
    "curl": "transfer a URL",
    "wget": "the non-interactive network downloader",
    "pip install": "install packages",
    "pip": "the Python package installer",
    "pytest": "run tests",
    "python": "an interpreted programming language: run a program",
    "flake8": "the modular source code checker: pep8, pyflakes and co",
    "pylint": "python code static checker",
    "ruff": "an extremely fast Python linter and code formatter",
    "mypy": "optional static typing for Python: a type checker",
    "sqlfluff lint": "lint SQL files",
    "echo": "display a line of text",
    "mkdir": "make directories",
    "rm": "remove files or directories",
    "cp": "copy files and directories",
    "mv": "move (rename) files",
    "pwd": "print name of current/working directory",
    "make": "GNU make utility to maintain groups of programs",
}
_PROGRAM_WORDS = 2


def gloss(command: str) -> str:
    """What the first program of a shell command does (:data:`GLOSS`), or ""."""
    words = command.replace("&&", " && ").split()
    while len(words) > 2 and words[0] == "cd" and words[2] == "&&":
        words = words[3:]
    if not words:
        return ""
    prog = words[0].rsplit("/", 1)[-1]
    if prog.startswith("python"):
        after = words[1:3]
        prog = "pytest" if after[:2] == ["-m", "pytest"] else "python"
    two = " ".join([prog, *words[1:_PROGRAM_WORDS]])
    return GLOSS.get(two) or GLOSS.get(prog, "")


def describe(p: EvidencePointer, text: str) -> str:
    """What the vector of an output is computed from: the call, what its program does, and
    the head of the output."""
    call = p.command or p.tool_name or ""
    what = gloss(call) if p.shell else ""
    head = "\n".join(x for x in (call, what) if x)
    return f"{head}\n{text[:TEXT_CHARS]}" if head else text[:TEXT_CHARS]


def _pack(matrix: NDArray[np.float32]) -> str:

    return base64.b64encode(matrix.astype("<f2").tobytes()).decode("ascii")


def _unpack(data: str, rows: int) -> NDArray[np.float32]:
    import numpy as np

    raw = np.frombuffer(base64.b64decode(data), dtype="<f2")
    return raw.reshape(rows, embed.DIM).astype(np.float32)


def block_key(session_id: str, block_id: str) -> str:
    return f"{session_id}/{block_id}"


def file_block(
    session: SessionStore,
    block: CompactBlock,
    texts: Mapping[str, str],
    indexed: Sequence[EvidencePointer],
) -> int:
    """Write the vectors of ``indexed`` (pointers of ``block``, with their texts) in the
    current unit of work; returns how many (0 without the extra). Fails open: an encoding
    error leaves the block without vectors (recall then ranks it by its words alone)."""
    if not indexed or not enabled():
        return 0
    enc = embed.encoder()
    if enc is None:
        return 0
    t0 = time.perf_counter()
    try:
        matrix = enc.encode([describe(p, texts.get(p.id, p.preview)) for p in indexed])
    except Exception as exc:  # the model is optional: never a reason to lose a compaction
        log.warning("semantic vectors of %s not computed: %s", block.id, exc)
        return 0
    STATS["vectors"] += len(indexed)
    STATS["seconds"] += time.perf_counter() - t0
    session.put_doc(
        NAMESPACE,
        block_key(session.session_id, block.id),
        {"ids": [p.id for p in indexed], "v": _pack(matrix)},
    )
    return len(indexed)


class SessionVectors:
    """The vectors of one session, read from the store once per new block."""

    def __init__(self, session: SessionStore) -> None:
        self.session = session
        self._blocks = -1
        self.ids: list[str] = []
        self._matrix: NDArray[np.float32] | None = None

    def load(self, blocks: int) -> None:
        """(Re)read the vectors when the session has ``blocks`` blocks and they were not read."""
        if blocks == self._blocks:
            return
        import numpy as np

        sid = self.session.session_id
        docs = self.session.store.docs(NAMESPACE, prefix=f"{sid}/")
        ids: list[str] = []
        parts: list[NDArray[np.float32]] = []
        for value in docs.values():
            got, data = value.get("ids"), value.get("v")
            if not isinstance(got, list) or not isinstance(data, str):
                continue
            try:
                parts.append(_unpack(data, len(got)))
            except ValueError:
                continue  # a damaged document: those outputs rank by their words
            ids.extend(str(i) for i in got)
        self.ids = ids
        self._matrix = np.concatenate(parts) if parts else None
        self._blocks = blocks

    def similarities(self, q: Vector) -> dict[str, float]:
        """Cosine of the question vector ``q`` with every output that has a vector (pointer
        id -> cos)."""
        if self._matrix is None:
            return {}
        sims = self._matrix @ q
        return {pid: round(float(s), 4) for pid, s in zip(self.ids, sims)}


_NAMES = re.compile(r"`[^`\n]*`|[\w.~/-]*[\w-]\.[A-Za-z]\w{0,5}(?:::[\w:.\[\]-]+)?|\S*/\S*")


def frame(text: str) -> str:
    """The question without the names it gives (files, test ids, quoted words): what kind
    of output it asks for is in its other words, and "test_fix.py" is no test run."""
    return " ".join(_NAMES.sub("it", text).split())


def question_vector(text: str) -> Vector | None:
    """The vector of a question (None: without the extra, or not in English)."""
    enc = embed.encoder() if english(text) else None
    if enc is None:
        return None
    t0 = time.perf_counter()
    try:
        vector: Vector = enc.encode([text])[0]
    finally:
        STATS["query_seconds"] += time.perf_counter() - t0
    return vector


def relative(sims: Mapping[str, float], among: Sequence[str]) -> dict[str, float]:
    """The similarities of ``among`` scaled to [0, 1] between the worst and the best of them
    (what ranking adds: which candidate the question is nearest, not how near in absolute);
    0 for those below :data:`SIM_FLOOR`."""
    got = [sims[d] for d in among if d in sims]
    if not got:
        return {}
    lo, hi = min(got), max(got)
    span = hi - lo
    out: dict[str, float] = {}
    for d in among:
        if d in sims:  # below the floor: no nearer than unrelated text, so no signal
            near = sims[d] >= SIM_FLOOR
            out[d] = ((sims[d] - lo) / span if span > 1e-6 else 1.0) if near else 0.0
    return out


__all__ = [
    "BECAUSE",
    "CANDIDATES",
    "MEANINGS",
    "NAMESPACE",
    "SIM_FLOOR",
    "Meanings",
    "SessionVectors",
    "block_key",
    "describe",
    "enabled",
    "english",
    "file_block",
    "frame",
    "gloss",
    "kind_wanted",
    "question_vector",
    "relative",
    "wanted",
    "wanted_for",
]
