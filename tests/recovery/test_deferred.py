"""The evidence index of a long first request is built after the answer (deferred jobs):
queries before the jobs ran see everything, a reopened session finds the jobs left by a crash,
and the index the jobs build is the one indexing at once builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold import ContextManager
from contextfold.recovery import deferred
from contextfold.recovery.deferred import NAMESPACE

WINDOW = 32_000


def long_history(turns: int = 150) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests of the parser package."},
    ]
    for i in range(turns):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": "bash",
                "arguments": json.dumps({"command": f"pytest -k case{i}"}),
            },
        }
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
        body = "\n".join(f"line {j} of run {i}: checking token_{i}_{j}" for j in range(40))
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"marker{i}\n{body}"})
    msgs.append({"role": "user", "content": "Please go on."})
    return msgs


def first_request(tmp: Path) -> ContextManager:
    cm = ContextManager(workspace=tmp, session_id="s", context_window=WINDOW)
    cm.add_many(long_history())
    cm.prepare()
    return cm


def blocks(cm: ContextManager) -> list[tuple[str, ...]]:
    store = cm.context.recovery.store
    return [tuple(p.id for p in b.evidence) for b in store.blocks()]


def test_long_first_request_defers_its_index(tmp_path: Path) -> None:
    cm = first_request(tmp_path)
    jobs = cm.context.store.docs(NAMESPACE, prefix="s/")
    assert jobs, "the long range's indexing was not deferred"
    assert cm.context.recovery.deferred.active
    assert not cm.context.recovery.store.blocks()  # nothing indexed on the request's path


def test_search_before_the_deferred_work_ran_finds_it(tmp_path: Path) -> None:
    cm = first_request(tmp_path)
    hits = cm.restore("marker17 pytest -k case17", k=3)
    assert hits and hits[0].text.startswith("marker17\n")
    assert hits[0].sha256_ok is not False
    # the queries indexed what they needed: the jobs are done and gone
    assert not cm.context.store.docs(NAMESPACE, prefix="s/")
    assert cm.recover_tool_result("call_3") == long_history()[3 * 2 + 3]["content"]


def test_crash_before_the_deferred_work_reopen_rebuilds(tmp_path: Path) -> None:
    first_request(tmp_path)  # "crashes": the deferred jobs never ran
    cm = ContextManager(workspace=tmp_path, session_id="s", context_window=WINDOW)
    assert cm.context.recovery.deferred.active  # found in the store
    from contextfold.engine.filing import index_deferred

    assert index_deferred(cm.context) > 0
    assert not cm.context.store.docs(NAMESPACE, prefix="s/")
    hits = cm.restore("marker42 pytest -k case42", k=3)
    assert hits and hits[0].text.startswith("marker42\n")
    again = ContextManager(workspace=tmp_path, session_id="s", context_window=WINDOW)
    assert not again.context.recovery.deferred.active
    assert blocks(again) == blocks(cm)


def test_deferred_index_matches_indexing_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = first_request(tmp_path / "later")
    view_later = later.view.view_dicts()
    from contextfold.engine.filing import index_deferred

    index_deferred(later.context)
    monkeypatch.setattr(deferred, "JOB_MESSAGES", 10**9)
    whole = first_request(tmp_path / "whole")
    index_deferred(whole.context)
    monkeypatch.setattr("contextfold.recovery.hooks.DEFER_MIN", 10**9)
    monkeypatch.setattr("contextfold.engine.ingest.DEFER_MIN", 10**9)
    now = first_request(tmp_path / "now")
    assert not now.context.recovery.deferred.active
    # the view (its recall lines included) is the same, and so is the index
    assert view_later == now.view.view_dicts()
    assert blocks(whole) == blocks(now)
    ids = lambda cm: sorted(i for b in blocks(cm) for i in b)  # noqa: E731
    assert ids(later) == ids(now)


def test_session_search_before_the_rows_were_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm = first_request(tmp_path)
    assert cm.context.recovery.deferred.active
    hits = cm.context.recovery.index.search("marker88", session_id="s")
    assert hits, "the message rows of the long first request were not written before the search"
    monkeypatch.setattr("contextfold.recovery.hooks.DEFER_MIN", 10**9)
    monkeypatch.setattr("contextfold.engine.ingest.DEFER_MIN", 10**9)
    now = first_request(tmp_path / "now")
    want = now.context.recovery.index.search("marker88", session_id="s")
    assert [(h.seq, h.snippet) for h in hits] == [(h.seq, h.snippet) for h in want]


def test_deferred_work_stops_between_jobs(tmp_path: Path) -> None:
    cm = first_request(tmp_path)
    from contextfold.engine.filing import index_deferred

    queued = len(cm.context.recovery.deferred.jobs)
    assert queued > 2
    ran = index_deferred(cm.context, lambda: True)  # a request arrived: one unit, then stop
    left = cm.context.store.docs(NAMESPACE, prefix="s/")
    assert len(left) == queued - ran  # each batch is committed with its jobs removed
    assert ran or cm.context.recovery.deferred.written  # (or the first part of a job of rows)
    # a reopen continues where the work stopped, and ends with the same index
    again = ContextManager(workspace=tmp_path, session_id="s", context_window=WINDOW)
    assert len(again.context.recovery.deferred.jobs) == len(left)
    index_deferred(again.context)
    assert not again.context.recovery.deferred.active


def test_a_long_job_of_rows_runs_in_parts(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full-text rows of a long first request are written a few at a time by the work that
    gives way to requests, so a request of the conversation waits for one short unit: a stop
    leaves the job queued whole (its progress is in memory), a reopen runs it again whole (the
    same rows written again), a search runs it whole at once, and each ends with what writing
    at once gives. On a folder and on PostgreSQL."""
    from contextfold.engine.filing import index_deferred

    def opened(sid: str, history: bool = True) -> ContextManager:
        cm = ContextManager(store=store_url, session_id=sid, context_window=WINDOW)
        if history:
            cm.add_many(long_history())
            cm.prepare()
        return cm

    def to_first_part(cm: ContextManager) -> str:
        jobs = cm.context.recovery.deferred.jobs
        key, job = next((k, j) for k, j in jobs if j.get("kind") == "rows")
        assert sum(b - a for a, b in job["positions"]) > deferred.RUN_ROWS  # type: ignore[misc, union-attr]
        while cm.context.recovery.deferred.jobs[0][0] != key:  # the jobs before it
            index_deferred(cm.context, lambda: True)
        index_deferred(cm.context, lambda: True)  # one part, then a request arrives
        assert cm.context.recovery.deferred.written == {key: deferred.RUN_ROWS}
        prefix = f"{cm.session_id}/"
        assert cm.context.store.docs(NAMESPACE, prefix=prefix)[key] == job  # queued, whole
        return key

    parts = opened("parts")
    key = to_first_part(parts)
    index_deferred(parts.context, lambda: True)
    assert parts.context.recovery.deferred.written == {key: 2 * deferred.RUN_ROWS}
    while parts.context.recovery.deferred.active:
        index_deferred(parts.context, lambda: False)
    assert not parts.context.recovery.deferred.written
    searched = opened("searched")
    to_first_part(searched)
    index_deferred(searched.context)  # everything now, as a search needs it: whole jobs
    assert not searched.context.recovery.deferred.active
    assert not searched.context.recovery.deferred.written
    crashed = opened("crash")
    to_first_part(crashed)
    crashed.close()  # "crashes" after a part
    again = opened("crash", history=False)
    index_deferred(again.context)  # the job runs again whole
    assert not again.context.recovery.deferred.active
    monkeypatch.setattr("contextfold.recovery.hooks.DEFER_MIN", 10**9)
    monkeypatch.setattr("contextfold.engine.ingest.DEFER_MIN", 10**9)
    now = opened("now")
    assert not now.context.recovery.deferred.active
    for query in ("marker3", "marker88", "token_140_7", "Please go on"):
        want = now.context.recovery.index.search(query, session_id="now")
        assert want, query
        for done in (parts, searched, again):
            got = done.context.recovery.index.search(query, session_id=done.session_id)
            assert [(h.seq, h.snippet) for h in got] == [(h.seq, h.snippet) for h in want], query
    for cm in (parts, searched, again, now):
        cm.close()


def test_search_across_sessions_runs_the_other_sessions_queued_jobs(tmp_path: Path) -> None:
    other = first_request(tmp_path)  # session "s": its rows are queued, not written
    assert other.context.recovery.deferred.active
    other.close()
    cm = ContextManager(workspace=tmp_path, session_id="t", context_window=WINDOW)
    cm.add({"role": "user", "content": "Where did we see marker88?"})
    hits = cm.context.recovery.index.search("marker88", session_id="s")
    assert hits and hits[0].session_id == "s", "the other session's queued rows were not found"
    assert not cm.context.store.docs(NAMESPACE, prefix="s/")  # run as its manager runs them
    everywhere = cm.context.recovery.index.search("marker17 token_17_3")
    assert everywhere and everywhere[0].session_id == "s"


def test_deferred_jobs_on_each_backend(store_url: str) -> None:
    """Queued, found again after a "crash", run by a reader without a manager: on a folder and
    on PostgreSQL alike."""
    from contextfold.engine.filing import queued_sessions, run_queued
    from contextfold.storage import open_store

    cm = ContextManager(store=store_url, session_id="s", context_window=WINDOW)
    cm.add_many(long_history())
    cm.prepare()
    assert cm.context.recovery.deferred.active and not cm.context.recovery.store.blocks()
    cm.close()  # "crashes": the deferred jobs never ran
    store = open_store(store_url)
    try:
        assert queued_sessions(store) == ["s"]
        assert run_queued(store) > 0 and queued_sessions(store) == []
    finally:
        store.close()
    again = ContextManager(store=store_url, session_id="s", context_window=WINDOW)
    assert not again.context.recovery.deferred.active
    hits = again.restore("marker42 pytest -k case42", k=3)
    assert hits and hits[0].text.startswith("marker42\n")
    assert again.context.recovery.index.search("marker88", session_id="s")
    again.close()


def test_a_search_scoped_to_other_agents_leaves_the_session_queued(tmp_path: Path) -> None:
    """A search runs the queued jobs only of sessions it may search: another agent's session
    is neither opened nor written."""
    first_request(tmp_path).close()  # session "s", its rows queued
    cm = ContextManager(workspace=tmp_path, session_id="t", agent_id="b", context_window=WINDOW)
    cm.add({"role": "user", "content": "Where did we see marker88?"})
    assert cm.context.store.session("s").agent_id != "b"
    hits = cm.context.recovery.index.search("marker88", agent_id="b")
    assert all(hit.session_id == "t" for hit in hits)
    assert cm.context.store.docs(NAMESPACE, prefix="s/"), "another agent's jobs were run"
    cm.close()


def test_queued_jobs_that_fail_leave_the_reader_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store failing while a reader runs another session's jobs fails open: the reader's
    search answers from what is indexed, and the jobs stay queued for later."""
    from contextfold.engine import filing
    from contextfold.errors import StorageError

    first_request(tmp_path).close()

    def broken(*args: object, **kwargs: object) -> int:
        raise StorageError("disk full")

    monkeypatch.setattr(filing, "index_deferred", broken)
    cm = ContextManager(workspace=tmp_path, session_id="t", context_window=WINDOW)
    assert filing.run_queued(cm.context.store) == 0
    cm.context.recovery.index.search("marker88")  # answers, from what is indexed
    assert cm.context.store.docs(NAMESPACE, prefix="s/"), "the failed jobs were dropped"
    cm.close()


def _call(name: str, args: dict[str, object]) -> dict[str, object]:
    return {
        "id": "c",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def test_tool_schemas_leave_the_queued_jobs_for_later(tmp_path: Path) -> None:
    """Building the agent tools (for their schemas, on the request's path) opens no index."""
    cm = first_request(tmp_path)
    queued = len(cm.context.store.docs(NAMESPACE, prefix="s/"))
    assert {s["function"]["name"] for s in cm.tool_schemas()} >= {"session_search", "recall"}  # type: ignore[index]
    assert len(cm.context.store.docs(NAMESPACE, prefix="s/")) == queued
    hits = cm.handle_tool_call(_call("session_search", {"query": "marker88"}))
    assert "marker88" in str(hits["content"])  # the tool itself runs the jobs first
