"""``contextfold ui`` as a user runs it: a process serving a store (a workspace folder, and a
PostgreSQL schema filled by replaying a bundled trajectory), stopped with Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_module
from tests.inspector.inspector_support import replay
from tests.support.pg_support import SchemaFactory, schema_factory

require_module("starlette")
require_module("uvicorn")
httpx = require_module("httpx")

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CONTEXTFOLD_STORE"}
    env["PYTHONPATH"] = str(REPO / "src")
    return env


class UiProcess:
    def __init__(self, store: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "contextfold", "ui", "--store", store, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        out = self.proc.stdout
        threading.Thread(target=lambda: [lines.put(line) for line in out], daemon=True).start()
        first = lines.get(timeout=60)
        assert first.startswith("contextfold inspector: http://127.0.0.1:"), first
        self.link = first.split(": ", 1)[1].strip()
        self.url, self.token = self.link.split("#token=")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=30)


@pytest.fixture
def pg() -> Iterator[SchemaFactory]:
    yield from schema_factory()


def _check_serving(ui: UiProcess, session_id: str, messages: int) -> None:
    listed = httpx.get(ui.url + "api/sessions", timeout=30).json()
    assert [(s["session_id"], s["messages"]) for s in listed["sessions"]] == [
        (session_id, messages)
    ]
    tl = httpx.get(ui.url + f"api/sessions/{session_id}", timeout=30).json()
    assert len(tl["compactions"]) >= 2
    view = httpx.get(ui.url + f"api/sessions/{session_id}/view?call=30", timeout=30).json()
    assert any(m["status"] == "summarized" for m in view["messages"])
    r = httpx.delete(ui.url + f"api/sessions/{session_id}", timeout=30)
    assert r.status_code == 401


def test_ui_on_a_workspace_folder(tmp_path: Path) -> None:
    done = replay(tmp_path / "ws")
    ui = UiProcess(str(tmp_path / "ws"))
    try:
        _check_serving(ui, done.session_id, len(done.messages))
        assert httpx.get(ui.url, timeout=30).status_code == 200
    finally:
        assert ui.stop() == 130
    assert ui.proc.stderr is not None and "interrupted" in ui.proc.stderr.read()


def test_ui_on_a_postgresql_store_keeps_its_url_to_itself(pg: SchemaFactory) -> None:
    schema = pg.schema()
    store = pg.open(schema)
    done = replay(store)
    url = f"{pg.url}?schema={schema}"
    ui = UiProcess(url)
    try:
        _check_serving(ui, done.session_id, len(done.messages))
        page = httpx.get(ui.url + "api/sessions", timeout=30).text
        assert pg.url not in page and schema not in page
    finally:
        ui.stop()


def test_ui_refuses_a_missing_store(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "contextfold", "ui", "--store", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert r.returncode == 2 and "no workspace" in r.stderr and "Traceback" not in r.stderr
