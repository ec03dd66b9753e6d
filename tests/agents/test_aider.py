"""aider (the real CLI, its default settings for an OpenAI-compatible model) through
``contextfold serve``: a session typed on its standard input, one ``/run`` of a noisy build per
turn whose output aider adds to the chat, streamed, with aider's own history summaries and
moving files block; then a question about the first failing run."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from tests.agents.aider_script import FIXED, AiderScript
from tests.agents.harness import (
    STORES,
    Stack,
    agent_program,
    base_env,
    check_session,
    make_project,
    marker,
    run_agent,
    stack,
)
from tests.agents.plan import FOLLOWUP, Plan, first_error

pytestmark = pytest.mark.timeout(900)

LIMIT = 24_000


def aider_lines(plan: Plan) -> str:
    lines = ["Fix the off-by-one in app.py."]
    for k in range(plan.runs):
        lines += [f"/run python3 run.py {k} {plan.size(k)}", f"Note the result of run {k}."]
    lines.append(FOLLOWUP)
    return "\n".join(lines) + "\n"


def aider_session(tmp_path: Path, st: Stack, plan: Plan, *, times: int) -> AiderScript:
    aider = agent_program("aider")
    assert plan.output_chars // 4 > times * LIMIT, "the plan must outgrow the limit"
    project = make_project(tmp_path / "project")
    script = AiderScript()
    st.fake.default = script
    env = base_env(tmp_path / "home")
    command = [str(aider), "--openai-api-base", st.url + "/v1", "--openai-api-key", "sk-test"]
    command += ["--model", "openai/gpt-fake", "--yes-always", "--no-git", "--no-check-update"]
    command += ["--analytics-disable", "--no-show-model-warnings", "--no-pretty", "app.py"]
    run_agent(command, project, env, timeout=800, st=st, stdin=aider_lines(plan))
    assert (project / "app.py").read_text() == FIXED
    assert len(script.notes) == plan.runs, "aider did not send one request per noted run"
    assert script.followups, "the follow-up question never reached the upstream"
    assert first_error() in script.followups[-1], (
        "the follow-up's request lacks the first failing run's error"
    )
    return script


@pytest.mark.parametrize("store", STORES)
def test_aider_short_session(tmp_path: Path, store: str) -> None:
    started = time.monotonic()
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = aider_session(tmp_path, st, Plan(runs=8), times=1)
        figures = check_session(st, route="/v1/chat/completions")
    print(
        {**figures, "summaries": script.summaries, "seconds": round(time.monotonic() - started, 1)}
    )


def _store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _message_bytes(folder: Path) -> int:
    """Bytes the embedded store holds for the messages: the message events of its log (body
    and head) plus its content-addressed blob files (the exact archive of message texts)."""
    con = sqlite3.connect(folder / "store.sqlite")
    try:
        row = con.execute(
            "SELECT SUM(LENGTH(CAST(data AS BLOB)) + IFNULL(LENGTH(CAST(head AS BLOB)), 0)) "
            "FROM events WHERE kind = 'message'"
        ).fetchone()
    finally:
        con.close()
    blobs = sum(p.stat().st_size for p in (folder / "blobs").rglob("*") if p.is_file())
    return int(row[0] or 0) + blobs


def _pg_bytes(url: str) -> int:
    """Bytes of the gateway's PostgreSQL tables: each table of its schema with its indexes and
    TOAST data (``pg_total_relation_size``)."""
    import psycopg

    base, _, query = url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    with psycopg.connect(base) as con:
        row = con.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("store", STORES)
def test_aider_rewrites_make_no_branch(tmp_path: Path, store: str) -> None:
    """aider rewrites its history every turn (summaries, the files block moving): the gateway
    records that as the client's own rewrite, not as a fork, stores what is new only, and every
    request still holds the files block and the output the user asked about in that turn.

    Measured once the gateway has closed the store, against the bytes of the distinct messages
    aider sent: what the store keeps of the messages (the message events of its log and its
    blob files, the byte-exact archive: an evidence body that is a logged message is not
    archived again) is well under that; the store's files as a whole (the log, the full-text
    index of the messages and of the evidence, its documents and SQLite's fixed pages) stay
    within a small constant factor of it, where storing a client rewrite again every turn
    grows them with the square of the turns. On PostgreSQL the whole store is the tables of
    the gateway's schema with their indexes and TOAST data (``pg_total_relation_size``),
    measured before the schema is dropped."""
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = aider_session(tmp_path, st, Plan(runs=12), times=1)
        check_session(st, route="/v1/chat/completions")
        branches = sum(v for k, v in st.metrics().items() if "branches_total" in k)
        # every message aider sent reached the upstream verbatim at least once (when it was new)
        seen = {
            json.dumps(m, sort_keys=True)
            for r in st.fake.received
            for m in (r.body or {}).get("messages", [])
        }
        distinct = sum(len(m.encode()) for m in seen)
        if store == "postgresql":
            whole = _pg_bytes(st.store)
            print(
                {"pg_total_relation_size": whole, "distinct": distinct, "ratio": whole / distinct}
            )
    if store == "embedded":
        whole = _store_bytes(Path(st.store))
        stored = _message_bytes(Path(st.store))
        print({"whole": whole, "stored": stored, "distinct": distinct, "ratio": whole / distinct})
        assert stored < distinct, f"the store holds {stored} bytes for {distinct} of messages"
    assert branches == 0, f"the gateway opened {branches} branches for one aider session"
    for text in script.main_requests:
        assert "def total(values):" in text, "a request lost aider's files block"
    for k, text in script.notes:
        assert marker(k) in text, f"the request about run {k} lacks run {k}'s output"
    # (measured: embedded 3.1x; PostgreSQL 8.2x, of which 1.1x are the empty tables and
    # indexes, most of the rest the tsvector index of each output as a message and as evidence)
    bound = 3.5 if store == "embedded" else 9.0
    assert whole < bound * distinct, f"the store holds {whole} bytes for {distinct} of messages"


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_aider_long_session(tmp_path: Path, store: str) -> None:
    started = time.monotonic()
    with stack(tmp_path, store, limit=LIMIT) as st:
        script = aider_session(tmp_path, st, Plan(runs=24), times=3)
        figures = check_session(st, route="/v1/chat/completions")
    print(
        {**figures, "summaries": script.summaries, "seconds": round(time.monotonic() - started, 1)}
    )
