"""Running a real agent program through ``contextfold serve`` against the scripted upstream.

Each agent test builds a :class:`Stack`: the fake upstream (tests/gateway/gateway_fakes.py) enforcing a
context limit with the provider's real errors, and a ``contextfold serve`` process in front of
it on the embedded store or on PostgreSQL (a schema of its own). The agent runs in a temp
project folder made by :func:`make_project`, whose ``run.py`` prints big, deterministic outputs
with a unique marker per run, and fails on some runs with a traceback.

The agents come from ``scripts/install_agents.py`` (``make agents``); a missing one skips with
the installer's reason, or fails under ``CONTEXTFOLD_REQUIRE_ALL=1``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import skip_or_fail
from tests.gateway.gateway_fakes import FakeUpstream, Received
from tests.gateway.gateway_helpers import REPO, gateway_process
from tests.support import pg_support

STORES = ["embedded", "postgresql"]


def _installer() -> Any:
    if "install_agents" in sys.modules:
        return sys.modules["install_agents"]
    spec = importlib.util.spec_from_file_location(
        "install_agents", REPO / "scripts" / "install_agents.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["install_agents"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def agent_program(name: str) -> Path:
    """The installed agent's program, or skip / fail naming why it is missing."""
    installer = _installer()
    agent = installer.AGENTS[name]
    path = installer.installed(agent)
    if path is None:
        skip_or_fail(installer.missing_reason(agent))
    return Path(path)


# ----------------------------------------------------------------------------- the project


def marker(k: int) -> str:
    """The unique text in run ``k``'s output."""
    return "CF" + hashlib.sha256(f"run-{k}".encode()).hexdigest()[:10]


def failing(k: int) -> bool:
    return k % 3 == 2


FIRST_FAILING = next(k for k in range(100) if failing(k))

RUN_PY = '''\
"""A noisy build step: python3 run.py K [KB] prints about KB kilobytes of log for run K."""
import hashlib, sys

k = int(sys.argv[1])
kb = int(sys.argv[2]) if len(sys.argv) > 2 else 20
mark = "CF" + hashlib.sha256(f"run-{k}".encode()).hexdigest()[:10]
line = 0
out = []
size = 0
while size < kb * 1000:
    text = f"run {k} step {line:05d}: compiled module_{line % 97:02d} ok ({(line * 7919) % 10007} bytes)"
    out.append(text)
    size += len(text) + 1
    line += 1
out.insert(len(out) // 2, f"run {k} marker {mark}")
print("\\n".join(out))
if k % 3 == 2:
    print("Traceback (most recent call last):")
    print('  File "run.py", line 21, in <module>')
    print(f"ValueError: run {k} failed: checksum mismatch {mark}")
    sys.exit(1)
print(f"run {k} finished: {mark}")
'''

APP_PY = """\
def total(values):
    return sum(values) + 1
"""


def make_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.py").write_text(RUN_PY, encoding="utf-8")
    (root / "app.py").write_text(APP_PY, encoding="utf-8")
    (root / "README.md").write_text("# demo\nRun `python3 run.py K` for build K.\n")
    return root


# ----------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    fake: FakeUpstream
    url: str
    log: Path
    store: str
    proc: subprocess.Popen[bytes]
    notes: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = out.get(name, 0.0) + float(value)
        return out

    def diagnosis(self) -> str:
        """What the upstream rejected and what the gateway answered, for a failure message."""
        rejected = [(r.path, r.tokens, r.error) for r in self.fake.received if r.error]
        statuses = self.gateway_statuses()
        errors = [
            line for line in self.log.read_text(errors="replace").splitlines() if "ERROR" in line
        ]
        return (
            f"upstream rejected {len(rejected)}: {rejected[:5]}; gateway statuses {statuses}; "
            f"gateway errors: {errors[-5:]}"
        )

    def log_events(self, name: str) -> list[dict[str, Any]]:
        """The gateway's JSON log events called ``name``."""
        out = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event = entry.get("log") if isinstance(entry, dict) else None
            if isinstance(event, dict) and event.get("event") == name:
                out.append(event)
        return out

    def gateway_statuses(self) -> dict[str, int]:
        """Status code -> how many answers the gateway gave, from its request log."""
        counts: dict[str, int] = {}
        for event in self.log_events("request"):
            key = str(event.get("status"))
            counts[key] = counts.get(key, 0) + 1
        for name, value in self.metrics().items():
            match = re.match(r'contextfold_gateway_requests_total\{.*status="(\d+)"', name)
            if match and not match.group(1).startswith("2"):
                key = match.group(1)
                counts[key] = max(counts.get(key, 0), int(value))
        return counts


@contextmanager
def stack(
    tmp_path: Path,
    store_kind: str,
    *,
    limit: int,
    extra: tuple[str, ...] = (),
) -> Iterator[Stack]:
    """The fake upstream (``limit`` tokens) and ``contextfold serve`` on the chosen store."""
    schema: str | None = None
    pg_url = ""
    if store_kind == "postgresql":
        pg_url = pg_support.require_postgres()
        schema = pg_support.new_schema_name()
        store = f"{pg_url}?schema={schema}"
    else:
        store = str(tmp_path / "store")
    fake = FakeUpstream(limit=limit).start()
    log = tmp_path / "gateway.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc, url = gateway_process(fake.url, store, log, *extra)
        yield Stack(fake, url, log, store, proc)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        fake.stop()
        if schema is not None:
            pg_support.drop_schema(pg_url, schema)


def run_agent(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    *,
    timeout: float,
    stdin: str | None = None,
    st: Stack | None = None,
) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    proc = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{command[0]} exited {proc.returncode} after {time.monotonic() - started:.0f} s\n"
            f"stdout: {proc.stdout[-4000:]}\nstderr: {proc.stderr[-4000:]}\n"
            + (st.diagnosis() if st is not None else "")
        )
    return proc


def base_env(home: Path) -> dict[str, str]:
    """The machine's environment with a private HOME and no real provider keys or URLs."""
    home.mkdir(parents=True, exist_ok=True)
    drop = ("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "CLAUDE", "CODEX_", "AIDER_", "MSWEA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"HOME": str(home), "NO_COLOR": "1", "TERM": "dumb"})
    return env


# ----------------------------------------------------------------------------- the checks


def request_text(rec: Received) -> str:
    return json.dumps(rec.body, ensure_ascii=False)


def model_of(rec: Received) -> str:
    """The model a request was for (Gemini names it in the path)."""
    match = re.search(r"/models/([^:/?]+)", rec.path)
    if match:
        return match.group(1)
    return str((rec.body or {}).get("model"))


def check_session(st: Stack, *, route: str, min_overflows_direct: int = 1) -> dict[str, Any]:
    """The issue's bar for one agent session through the gateway; returns the figures.

    * at most one upstream request over the limit (the one that teaches the gateway the limit);
    * no other upstream 400 (tool pairing, thinking signatures, roles);
    * no 4xx/5xx answered by the gateway;
    * the history the agent built outgrew the limit (else the test proves nothing).
    """
    received = list(st.fake.received)
    on_route = [r for r in received if r.path.split("?")[0].startswith(route)]
    overflows = [r for r in on_route if r.error == "overflow"]
    other = [r for r in received if r.error not in (None, "overflow")]
    statuses = st.gateway_statuses()
    bad = {k: v for k, v in statuses.items() if not k.startswith("2")}
    assert not other, f"upstream rejected {len(other)} request(s): {[r.error for r in other][:3]}"
    per_model: dict[str, list[Received]] = {}
    for r in overflows:
        per_model.setdefault(model_of(r), []).append(r)
    # one overflow may teach the gateway the limit; it then keeps every request below it,
    # for every model it sends (side requests to other models included)
    assert len(overflows) <= 1, (
        f"{len(overflows)} upstream requests over the limit of {st.fake.limit} tokens, per "
        f"model: {[(model_of(r), r.tokens) for r in overflows]}"
    )
    assert not bad, f"the gateway answered errors {bad}; log tail: {st.log.read_text()[-3000:]}"
    accepted = [r for r in on_route if r.error is None]
    assert accepted, f"no request reached the upstream on {route}"
    _check_left_view(accepted)
    figures = {
        "requests": len(on_route),
        "overflows": {m: len(rs) for m, rs in per_model.items()},
        "max_tokens": max(r.tokens for r in accepted),
        "limit": st.fake.limit,
        "statuses": statuses,
        "compacted_answers": sum(1 for e in st.log_events("request") if e.get("compaction")),
    }
    return figures


def _check_left_view(accepted: list[Received]) -> None:
    """The first failing run's error had left the view before the follow-up was asked (else
    the follow-up proves nothing about injection or recall)."""
    from tests.agents.plan import FOLLOWUP, first_error

    texts = [request_text(r) for r in accepted]
    asked = next((i for i, t in enumerate(texts) if FOLLOWUP in t), None)
    assert asked is not None, "the follow-up question never reached the upstream"
    assert asked > 0 and first_error() not in texts[asked - 1], (
        "the first failing run's error was still in the view before the follow-up: "
        "the session is too short to test its recall"
    )
