"""Evidence indexing deferred past the answer: the compact blocks (pointers, full-text rows,
exact keys) of a long first request, built after the answer instead of on its path.

The evidence index is derived state: every message it points into is in the session's log and
every offloaded body is a blob, both committed with the compaction. So when a compaction (or
the ingest of a long batch) would index a large range at once, it records *what* to index in a
job document (namespace ``evidence-deferred``, key ``<session>/<seq>.<n>``: the history
positions, the offloaded bodies' paths and sha256, the summary items and the record's fields),
committed in the same unit of work. The jobs are run, in order, each in a unit of its own that
appends exactly the block indexing at once would have appended and deletes the job:

- after the answer, by the gateway's work prepared ahead (it stops between units of work when
  a request arrives: the rest waits for the next turn; a long job of full-text rows is then
  written a few rows per unit, its progress kept in memory, so after a crash it runs again
  whole, rewriting the same rows);
- synchronously, before anything reads the evidence (a search, a recall, an injection): a
  query never runs on an index that lacks what it should find;
- by whoever opens the session next, when a crash came first: the job documents are found in
  the store (nothing of the index is lost; it is rebuilt from the log).

While jobs are queued, any further indexing is queued behind them (the blocks keep their order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.messages import Message
from ..core.records import CompactionRecord, OffloadEntry
from ..evidence.fields import describe
from ..evidence.model import CompactBlock
from ..jsontypes import JSON, JSONObject
from .sessions.log import LogEntry, search_doc

if TYPE_CHECKING:
    from .hooks import Recovery

NAMESPACE = "evidence-deferred"
#: a range of at least this many messages indexed at once is deferred (a long first request)
DEFER_MIN = 256
#: messages per job: the unit of work the deferred indexing yields between
JOB_MESSAGES = 12
#: messages per job of full-text rows of logged messages (cheaper per message)
ROW_MESSAGES = 96
#: full-text rows written per unit of work by the work that gives way to requests (a job of
#: rows is split as it runs, the rest staying queued): the commit of 96 rows held the session
#: for 10-30 ms, which a request of the conversation arriving meanwhile waited for
RUN_ROWS = 8


@dataclass(frozen=True, slots=True)
class Offloaded:
    """Where an offloaded result's full body is (an :class:`~..evidence.store.OffloadInfo`)."""

    path: str
    sha256: str


def _ranges(positions: Sequence[int]) -> list[JSON]:
    out: list[JSON] = []
    start = prev = -2
    for p in positions:
        if p != prev + 1:
            if start >= 0:
                out.append([start, prev + 1])
            start = p
        prev = p
    if start >= 0:
        out.append([start, prev + 1])
    return out


def _is_rows(job: Mapping[str, object]) -> bool:
    return job.get("kind") == "rows"


def _positions(ranges: object) -> Iterator[int]:
    if not isinstance(ranges, list):
        return
    for r in ranges:
        if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r):
            yield from range(r[0], r[1])


def recall_lines(block: CompactBlock) -> list[str]:
    """The compaction message's recall lines: the block's newest outputs, one line each."""
    lines = []
    for p in block.evidence:
        if p.tool_use_id is None:
            continue
        kinds = ",".join(p.content_types[:2])
        lines.append(f"{p.id}: {describe(p)[:80]} [{kinds}]")
    return lines[-12:]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


class DeferredEvidence:
    """The queued indexing jobs of one session (see the module's docstring)."""

    def __init__(self, recovery: Recovery) -> None:
        self.recovery = recovery
        #: (key, job) in order; None until read from the store
        self._jobs: list[tuple[str, JSONObject]] | None = None
        #: tool call ids the queued jobs index (evidence already, for ``after_compaction``)
        self.covered: set[str] = set()
        #: the range the running compaction summarized, queued with its record
        self.pending: JSONObject | None = None
        #: (seq, n) of the newest job key given (keys sort in queue order)
        self._last = (-1, -1)
        #: key -> rows written so far of a job of rows run in parts (in memory only: after a
        #: crash the job runs again whole, rewriting the same rows)
        self.written: dict[str, int] = {}

    # ------------------------------------------------------------------ the queue
    @property
    def jobs(self) -> list[tuple[str, JSONObject]]:
        if self._jobs is None:
            session = self.recovery.ctx.session
            found = sorted(session.store.docs(NAMESPACE, prefix=f"{session.session_id}/").items())
            self._jobs = [(k, dict(v)) for k, v in found]
            if found:
                seq, _, n = found[-1][0].rpartition("/")[2].partition(".")
                if seq.isdigit() and n.isdigit():
                    self._last = (int(seq), int(n))
            for _, job in self._jobs:
                self._cover(job)
        return self._jobs

    @property
    def active(self) -> bool:
        """Whether indexing jobs wait (new indexing then queues behind them)."""
        return bool(self.jobs)

    def _cover(self, job: Mapping[str, object]) -> None:
        if job.get("kind") == "rows":
            return
        history = self.recovery.ctx.view.history
        for i in _positions(job.get("positions")):
            if i < len(history):
                call_id = history[i].tool_call_id
                if call_id:
                    self.covered.add(call_id)

    def spec(
        self,
        messages: Sequence[Message],
        offloaded: Mapping[str, OffloadEntry],
        *,
        items: Sequence[tuple[str, str]] = (),
        token_before: int = 0,
        token_after: int = 0,
        boundary_uuid: str | None = None,
        natural_summary: str = "",
        tier: str = "none",
        strategy: str = "offload",
    ) -> JSONObject:
        """A job indexing ``messages`` (of the history) as one block, as
        ``EvidenceStore.index_compaction`` would with these fields."""
        uuids = self.recovery.ctx.view.uuids
        positions = sorted(uuids[m.uuid] for m in messages if m.uuid in uuids)
        return {
            "positions": _ranges(positions),
            "offloaded": {k: [str(e.path), e.sha256] for k, e in offloaded.items()},
            "items": [[t, i] for t, i in items],
            "token_before": token_before,
            "token_after": token_after,
            "boundary_uuid": boundary_uuid,
            "natural_summary": natural_summary,
            "tier": tier,
            "strategy": strategy,
        }

    def defer_range(
        self, removed: Sequence[Message], items: list[tuple[str, str]], summary: str, tier: str
    ) -> list[str]:
        """Hold the summarized range's job until the compaction's record is known (queued by
        ``flush_pending_block``); the recall lines of its newest outputs, as the whole block
        gives them, from a block of its tail alone (pointers do not depend on what precedes)."""
        recovery = self.recovery
        self.pending = self.spec(
            removed,
            recovery.offload_map(removed),
            items=items,
            token_before=recovery.view_tokens(),
            natural_summary=summary,
            tier=tier,
            strategy="progressive",
        )
        n = 48
        while True:
            tail = removed[-n:]
            block = recovery.store.build_compaction_block(
                messages=tail,
                offloaded=recovery.offload_map(tail),
                summary_items_source=[],
                known_calls=recovery.owners(tail),
                token_before=0,
                token_after=0,
                boundary_uuid=None,
                natural_summary="",
                tier=tier,
                strategy="progressive",
            )
            recovery.store._texts.clear()  # kept for a block appended: none is
            lines = recall_lines(block)
            if len(lines) >= 12 or n >= len(removed):
                return lines
            n *= 4

    def flush(self, record: CompactionRecord | None) -> None:
        """Queue the summarized range held by :meth:`defer_range`, with ``record``'s fields."""
        job, self.pending = self.pending, None
        if job is not None:
            fields: dict[str, JSON] = {"boundary_uuid": None, "token_after": 0}
            if record is not None:
                fields = {"boundary_uuid": record.boundary_uuid, "token_after": record.tokens_after}
            self.queue_range(job, fields)

    def queue_messages(
        self,
        msgs: Sequence[Message],
        *,
        record: CompactionRecord | None = None,
        boundary_uuid: str | None = None,
        strategy: str = "offload",
    ) -> None:
        """Queue the block of ``msgs`` indexing would append now (an output offloaded on
        arrival, or the outputs a compaction left in view as placeholders: ``record``)."""
        offloaded = self.recovery.offload_map(msgs)
        if record is None:
            job = self.spec(msgs, offloaded, boundary_uuid=boundary_uuid, strategy=strategy)
        else:
            job = self.spec(
                msgs,
                offloaded,
                token_before=record.tokens_before,
                token_after=record.tokens_after,
                boundary_uuid=record.boundary_uuid,
                tier=record.tier.value,
            )
        self.queue(job)

    def queue_rows(self, start: int, count: int, first_event: int, ts: str) -> None:
        """Queue the full-text rows of the messages ``start .. start + count`` just logged
        (their events numbered from ``first_event``, logged at ``ts``), in jobs of
        :data:`ROW_MESSAGES`."""
        for a in range(start, start + count, ROW_MESSAGES):
            b = min(a + ROW_MESSAGES, start + count)
            event = first_event + a - start
            self.queue({"kind": "rows", "positions": [[a, b]], "event": event, "ts": ts})

    def queue(self, job: JSONObject) -> None:
        """Record ``job`` in the current unit of work (committed with what it indexes)."""
        session = self.recovery.ctx.session
        jobs = self.jobs
        seq = max(session.next_seq, self._last[0])
        n = self._last[1] + 1 if seq == self._last[0] else 0
        self._last = (seq, n)
        key = f"{session.session_id}/{seq:012d}.{n:06d}"  # after every job queued before
        session.put_doc(NAMESPACE, key, job)
        jobs.append((key, job))
        self._cover(job)

    def queue_range(self, job: JSONObject, record_fields: Mapping[str, JSON]) -> None:
        """Queue a summarized range in jobs of at most :data:`JOB_MESSAGES` messages; the
        last one carries the summary items, the natural summary and the record's fields."""
        positions = list(_positions(job.get("positions")))
        chunks = [positions[i : i + JOB_MESSAGES] for i in range(0, len(positions), JOB_MESSAGES)]
        offloaded = job.get("offloaded")
        offloaded = offloaded if isinstance(offloaded, dict) else {}
        history = self.recovery.ctx.view.history
        for n, chunk in enumerate(chunks or [[]]):
            last = n == len(chunks) - 1 or not chunks
            keys = {history[i].tool_call_id or "" for i in chunk} | {history[i].uuid for i in chunk}
            part: JSONObject = {
                **job,
                "positions": _ranges(chunk),
                "offloaded": {k: v for k, v in offloaded.items() if k in keys},
            }
            if last:
                part.update(record_fields)
            else:
                part.update(items=[], natural_summary="", token_after=0, boundary_uuid=None)
            self.queue(part)

    # ------------------------------------------------------------------ running
    def run(self, stop: Callable[[], bool] | None = None) -> int:
        """Run the queued jobs in order, each in a unit of its own; ``stop()`` (checked
        between units) leaves the rest queued, and with it a long job of rows runs in parts of
        :data:`RUN_ROWS`. How many jobs ran (to the end)."""
        done = 0
        ran = False  # at least one unit runs before ``stop()`` is heeded
        recovery = self.recovery
        units = recovery.ctx.units
        while self.jobs:
            if stop is not None and ran and stop():
                break
            ran = True
            part = self._run_rows_part() if stop is not None else None
            if part is not None:  # work that gives way to requests: rows a few at a time
                done += part
                continue
            batch, size = 0, 0  # small jobs (one output each) run together
            while batch < len(self.jobs) and (not batch or size < JOB_MESSAGES):
                count = sum(1 for _ in _positions(self.jobs[batch][1].get("positions")))
                if (
                    batch
                    and stop is not None
                    and count > RUN_ROWS
                    and _is_rows(self.jobs[batch][1])
                ):
                    break  # a long job of rows runs in parts of its own
                size += count
                batch += 1
            with units.unit():
                for key, job in self.jobs[:batch]:
                    self._index(job)
                    recovery.ctx.session.put_doc(NAMESPACE, key, None)
            for key, _ in self.jobs[:batch]:
                self.written.pop(key, None)  # a job begun in parts, run whole (a search)
            del self.jobs[:batch]
            done += batch
        if not self.jobs:
            self.covered.clear()
        return done

    def _run_rows_part(self) -> int | None:
        """When the first job writes more than :data:`RUN_ROWS` full-text rows: write the next
        of them in a unit of their own; the last part also removes the job. 1 when the job is
        done, 0 when rows of it are left, None when the job is not such a job."""
        key, job = self.jobs[0]
        if not _is_rows(job):
            return None
        positions = list(_positions(job.get("positions")))
        start = self.written.get(key, 0)
        if not start and len(positions) <= RUN_ROWS:
            return None
        end = start + RUN_ROWS
        last = end >= len(positions)
        with self.recovery.ctx.units.unit():
            self._rows(job, positions[start:end])
            if last:
                self.recovery.ctx.session.put_doc(NAMESPACE, key, None)
        if last:
            del self.jobs[0]
            self.written.pop(key, None)
            return 1
        self.written[key] = end
        return 0

    def _rows(self, job: Mapping[str, object], part: Sequence[int] | None = None) -> None:
        """The full-text rows of logged messages, as the log's append writes them (``part``:
        only those positions of the job's)."""
        session = self.recovery.ctx.session
        history = self.recovery.ctx.view.history
        listed = list(_positions(job.get("positions")))
        if not listed:
            return
        # the job's event numbers count from its first listed position
        first, ts = _int(job.get("event")) - listed[0], _text(job.get("ts"))
        positions = [i for i in (listed if part is None else part) if i < len(history)]
        if not positions:
            return
        docs = [
            search_doc(
                session.session_id,
                session.agent_id,
                LogEntry(seq=i, uuid=history[i].uuid, ts=ts, message=history[i]),
                first + i,
            )
            for i in positions
        ]
        session.index(docs)

    def _index(self, job: Mapping[str, object]) -> None:
        if _is_rows(job):
            self._rows(job)
            return
        recovery = self.recovery
        history = recovery.ctx.view.history
        msgs = [history[i] for i in _positions(job.get("positions")) if i < len(history)]
        raw = job.get("offloaded")
        offloaded = {
            str(k): Offloaded(str(v[0]), str(v[1]))
            for k, v in (raw.items() if isinstance(raw, dict) else ())
            if isinstance(v, list) and len(v) == 2
        }
        items = job.get("items")
        pairs = [
            (str(p[0]), str(p[1]))
            for p in (items if isinstance(items, list) else [])
            if isinstance(p, list) and len(p) == 2
        ]
        boundary = job.get("boundary_uuid")
        recovery.store.index_compaction(
            messages=msgs,
            offloaded=offloaded,
            summary_items_source=pairs,
            known_calls=recovery.owners(msgs),
            token_before=_int(job.get("token_before")),
            token_after=_int(job.get("token_after")),
            boundary_uuid=boundary if isinstance(boundary, str) else None,
            natural_summary=_text(job.get("natural_summary")),
            tier=_text(job.get("tier")) or "none",
            strategy=_text(job.get("strategy")) or "offload",
        )


__all__ = ["DEFER_MIN", "JOB_MESSAGES", "NAMESPACE", "DeferredEvidence", "Offloaded"]
