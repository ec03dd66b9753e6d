"""What real agent sessions cost through the gateway, against the agent's own compaction.

Sessions are *recorded*: ``--record`` runs the real agent programs (Claude Code, Codex CLI,
Gemini CLI, aider, mini-swe-agent, installed by ``make agents``) on the real-agent tests'
session (a code fix, then 16 noisy build runs whose output outgrows the scripted upstream's context limit, then a
follow-up question about the first failing run) twice: straight to the scripted upstream
(the agent on its own: it meets the limit's real errors and compacts or fails as it does),
and through ``contextfold serve`` (a recording proxy in front of it keeps what the agent sent,
so the tokens the gateway passed on verbatim can be told apart). Each upstream request is
kept as a few numbers in ``benchmarks/agent_sessions/<agent>.json`` (its tokens, the prefix
it shares with the previous request, the verbatim part, its status); the recordings are
bundled, so ``make bench`` needs neither the agents nor a network, and gives the same table
on every machine. Re-record after a change to the gateway or to an agent's version.

Cost is the replay benchmark's cache-aware cost: per accepted request, 0.1 x the prefix
it shares with the previous request to the same model (what a provider's prompt cache
serves) + 1.0 x the rest, in tokens (characters / 4, as the scripted upstream counts). A
request the upstream refused (over the limit) costs nothing but is counted. Run:
``python -m benchmarks.agent_cost`` (``--record [AGENT ...]`` to record again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "src"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from contextfold.bench.metrics import CACHED_RATE  # noqa: E402

SESSIONS = ROOT / "benchmarks" / "agent_sessions"
AGENTS = ("claude-code", "codex", "gemini-cli", "aider", "mini-swe-agent")
#: the scripted upstream's context limit per agent (as in the real-agent tests)
LIMITS = {
    "claude-code": 45_000,
    "codex": 30_000,
    "gemini-cli": 30_000,
    "aider": 24_000,
    "mini-swe-agent": 16_000,
}
RUNS = 16
#: seconds an agent run may take (an agent that never finishes is recorded as not finished)
RUN_TIMEOUT = 300
#: the instruction of each agent's own compaction request
CLIENT_COMPACTION = (
    "Your task is to create a detailed summary",  # Claude Code
    "You are performing a CONTEXT CHECKPOINT COMPACTION",  # Codex CLI
    "distilling chat history into a structured XML <state_snapshot>",  # Gemini CLI
    "summarize this partial conversation",  # aider (its summary of old turns)
)
#: Gemini CLI compresses its history at this share of what it takes the model's window to be
#: (1,048,576 tokens for every Gemini model): 0.02 is about 21K, under the 30K limit, as its
#: default 0.5 would be for a model whose window it knew
GEMINI_COMPRESSION = 0.02


# ---------------------------------------------------------------------- request shapes


def _parts(path: str, body: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
    """(tools, system, messages) of a request in any of the four wire formats."""
    if path.startswith("/v1/responses"):
        return body.get("tools"), body.get("instructions"), list(body.get("input") or [])
    if "/models/" in path:
        return body.get("tools"), body.get("systemInstruction"), list(body.get("contents") or [])
    return body.get("tools"), body.get("system"), list(body.get("messages") or [])


def _additional_tools(items: list[Any]) -> bool:
    """Codex sends its tools as an ``additional_tools`` input item."""
    return any(isinstance(i, dict) and i.get("type") == "additional_tools" for i in items)


#: aider's own side call (it has no tools: its main requests are told apart by this)
AIDER_SUMMARY = CLIENT_COMPACTION[-1]


def _side(agent: str, text: str, tools: Any, messages: list[Any]) -> bool:
    """A request that is not a step of the session: a title, a classifier, a summary."""
    if agent == "aider":  # aider sends no tools, so its steps have none either
        return AIDER_SUMMARY in text
    return not tools and not _additional_tools(messages)


def _stream(path: str, body: dict[str, Any]) -> str:
    """Requests whose prompts share a cache: the same model on the same route."""
    model = path.split("/models/")[1].split(":")[0] if "/models/" in path else body.get("model")
    return f"{path.split('?')[0].split(':')[0]}|{model}"


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo = 0
    while lo < n and a[lo : lo + 4096] == b[lo : lo + 4096]:
        lo += 4096
    while lo < n and a[lo] == b[lo]:
        lo += 1
    return lo


def _key(message: Any) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


def figures(
    received: list[tuple[str, Any, str | None]],
    client: list[tuple[str, Any]] | None,
    agent: str = "",
) -> list[dict[str, Any]]:
    """Per upstream request: tokens, cached prefix tokens, verbatim tokens, refused or not.
    ``client``: what the agent sent (through the gateway), None when it talked directly."""
    sent: set[str] = set()
    for path, body in client or []:
        if isinstance(body, dict):
            sent.update(_key(m) for m in _parts(path, body)[2])
    previous: dict[str, str] = {}
    out = []
    for path, body, error in received:
        if not isinstance(body, dict) or "count" in path.lower():
            continue
        tools, system, messages = _parts(path, body)
        text = json.dumps([tools, system, messages], ensure_ascii=False)
        stream = _stream(path, body)
        cached = _common(previous.get(stream, ""), text) if error is None else 0
        if error is None:
            previous[stream] = text
        if client is None:
            verbatim = len(json.dumps(messages, ensure_ascii=False))
        else:
            verbatim = sum(len(_key(m)) for m in messages if _key(m) in sent)
        out.append(
            {
                "tokens": len(text) // 4,
                "cached": cached // 4,
                "verbatim": verbatim // 4,
                "error": error,
                "client_compaction": any(p in text for p in CLIENT_COMPACTION),
                "side": _side(agent, text, tools, messages),
            }
        )
    return out


# ---------------------------------------------------------------------- recording


class RecordingProxy:
    """A pass-through HTTP proxy on 127.0.0.1 that keeps every request body it relays."""

    def __init__(self, target: str) -> None:
        import httpx
        import uvicorn
        from starlette.applications import Starlette
        from starlette.background import BackgroundTask
        from starlette.requests import Request
        from starlette.responses import StreamingResponse
        from starlette.routing import Route

        self.target = target
        self.bodies: list[tuple[str, Any]] = []
        client = httpx.AsyncClient(timeout=600)
        hop = {"host", "content-length", "transfer-encoding", "connection"}

        async def relay(request: Request) -> StreamingResponse:
            raw = await request.body()
            try:
                self.bodies.append((request.url.path, json.loads(raw)))
            except ValueError:
                self.bodies.append((request.url.path, None))
            url = self.target + request.url.path
            if request.url.query:
                url += "?" + request.url.query
            headers = {k: v for k, v in request.headers.items() if k.lower() not in hop}
            req = client.build_request(request.method, url, headers=headers, content=raw)
            resp = await client.send(req, stream=True)
            out = {k: v for k, v in resp.headers.items() if k.lower() not in hop}
            return StreamingResponse(
                resp.aiter_raw(),
                status_code=resp.status_code,
                headers=out,
                background=BackgroundTask(resp.aclose),
            )

        app = Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), daemon=True
        )

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the recording proxy did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"


def _run(command: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None) -> int:
    import subprocess

    try:
        proc = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            input=None if stdin is None else stdin.encode(),
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"{Path(command[0]).name}: no end after {RUN_TIMEOUT} s", file=sys.stderr)
        return -1  # recorded as not finished
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").splitlines()
        said = [line[:600] for line in lines if "Error" in line and " at " not in line]
        print(f"{Path(command[0]).name} exited {proc.returncode}:", *said[-3:], file=sys.stderr)
    return proc.returncode


def _claude(url: str, root: Path, fake: Any) -> list[int]:
    from tests.agents.claude_script import ClaudeScript
    from tests.agents.harness import agent_program, base_env, make_project
    from tests.agents.plan import FOLLOWUP, TASK, Plan

    project = make_project(root / "project")
    fake.default = ClaudeScript(Plan(runs=RUNS), project)
    env = base_env(root / "home")
    env.update(
        {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "sk-ant-contextfold-bench",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    )
    claude = str(agent_program("claude-code"))
    options = ["-p", "--output-format", "stream-json", "--verbose"]
    options += ["--allowedTools", "Bash,Read,Edit"]
    first = _run([claude, TASK, *options], project, env)
    return [first, _run([claude, FOLLOWUP, "--continue", *options], project, env)]


def _codex(url: str, root: Path, fake: Any) -> list[int]:
    from tests.agents.codex_script import CodexScript
    from tests.agents.harness import agent_program, base_env, make_project
    from tests.agents.plan import FOLLOWUP, TASK, Plan
    from tests.agents.test_codex import codex_config

    project = make_project(root / "project")
    fake.default = CodexScript(Plan(runs=RUNS))
    env = base_env(root / "home")
    home = root / "home" / ".codex"
    home.mkdir(parents=True)
    # the scripted model's window, as Codex knows a real model's: its own compaction starts at
    # 90% of it (Codex's default share), as it does with its own models
    limit = LIMITS["codex"]
    config = "check_for_update_on_startup = false\n"
    config += (
        f"model_context_window = {limit}\nmodel_auto_compact_token_limit = {limit * 9 // 10}\n"
    )
    config += codex_config(url)
    (home / "config.toml").write_text(config + "\n[analytics]\nenabled = false\n")
    env.update({"CODEX_HOME": str(home), "OPENAI_API_KEY": "sk-contextfold-bench"})
    codex = [str(agent_program("codex")), "exec", "--skip-git-repo-check"]
    codex += ["--dangerously-bypass-approvals-and-sandbox"]
    first = _run([*codex, TASK], project, env)
    return [first, _run([*codex, "resume", "--last", FOLLOWUP], project, env)]


def _gemini(url: str, root: Path, fake: Any) -> list[int]:
    from tests.agents.gemini_script import GeminiScript
    from tests.agents.harness import agent_program, base_env, make_project
    from tests.agents.plan import FOLLOWUP, TASK, Plan

    project = make_project(root / "project")
    fake.default = GeminiScript(Plan(runs=RUNS), project)
    home = root / "home"
    env = base_env(home)
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "model": {"compressionThreshold": GEMINI_COMPRESSION},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env.update({"GEMINI_API_KEY": "contextfold-bench-key", "GOOGLE_GEMINI_BASE_URL": url})
    gemini = [str(agent_program("gemini-cli")), "--yolo", "--skip-trust"]
    gemini += ["--output-format", "stream-json"]
    first = _run([*gemini, "-p", TASK], project, env)
    return [first, _run([*gemini, "--resume", "latest", "-p", FOLLOWUP], project, env)]


def _aider(url: str, root: Path, fake: Any) -> list[int]:
    from tests.agents.aider_script import AiderScript
    from tests.agents.harness import agent_program, base_env, make_project
    from tests.agents.plan import Plan
    from tests.agents.test_aider import aider_lines

    project = make_project(root / "project")
    fake.default = AiderScript()
    env = base_env(root / "home")
    command = [str(agent_program("aider")), "--openai-api-base", url + "/v1"]
    command += ["--openai-api-key", "sk-contextfold-bench", "--model", "openai/gpt-fake"]
    command += ["--yes-always", "--no-git", "--no-check-update", "--analytics-disable"]
    command += ["--no-show-model-warnings", "--no-pretty", "app.py"]
    return [_run(command, project, env, stdin=aider_lines(Plan(runs=RUNS)))]


def _mini(url: str, root: Path, fake: Any) -> list[int]:
    from tests.agents.harness import agent_program, base_env, make_project
    from tests.agents.mini_script import MiniScript
    from tests.agents.plan import FOLLOWUP, Plan
    from tests.agents.test_mini_swe_agent import MODEL

    project = make_project(root / "project")
    fake.default = MiniScript(Plan(runs=RUNS))
    env = base_env(root / "home")
    env.update(
        {
            "OPENAI_API_BASE": url + "/v1",
            "OPENAI_API_KEY": "sk-contextfold-bench",
            "MSWEA_CONFIGURED": "true",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
    )
    command = [str(agent_program("mini-swe-agent")), "--yolo", "-m", MODEL]
    command += ["-t", "Fix app.py and run the build steps."]
    command += ["-o", str(root / "trajectory.json")]
    # when it wants to finish it asks for a new task: the follow-up, then Enter
    return [_run(command, project, env, stdin=f"{FOLLOWUP}\n\n")]


RUNNERS: dict[str, Callable[[str, Path, Any], list[int]]] = {
    "claude-code": _claude,
    "codex": _codex,
    "gemini-cli": _gemini,
    "aider": _aider,
    "mini-swe-agent": _mini,
}


def _work_done(agent: str, script: Any) -> bool:
    """Whether the scripted session's work reached the model: aider and mini-swe-agent exit 0
    after a refused request (aider goes on to its next input line, mini-swe-agent ends), so
    their exit code alone does not say the session finished. The others: their exit code."""
    if agent == "aider":  # every "note the result of run K" turn answered, then the follow-up
        return len(script.notes) == RUNS and bool(script.followups)
    if agent == "mini-swe-agent":  # every build step run and the follow-up asked
        return bool(script.followups)
    return True


def _compacted_turns(log: Path) -> int:
    turns = 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line).get("log")
        except (ValueError, AttributeError):
            continue
        if isinstance(event, dict) and event.get("event") == "request" and event.get("compaction"):
            turns += 1
    return turns


def record(agent: str) -> dict[str, Any]:
    """Both sessions of one agent, recorded."""
    from tests.gateway.gateway_fakes import FakeUpstream
    from tests.gateway.gateway_helpers import gateway_process

    out: dict[str, Any] = {"agent": agent, "limit": LIMITS[agent], "runs": RUNS}
    with tempfile.TemporaryDirectory(prefix=f"cf-bench-{agent}-") as tmp:
        root = Path(tmp)
        fake = FakeUpstream(limit=LIMITS[agent]).start()
        try:
            exits = RUNNERS[agent](fake.url, root / "direct", fake)
            received = [(r.path, r.body, r.error) for r in fake.received]
            out["direct"] = {
                "exit_codes": exits,
                "work_done": _work_done(agent, fake.default),
                "requests": figures(received, None, agent),
            }
            fake.received.clear()
            log = root / "gateway.log"
            proc, url = gateway_process(fake.url, str(root / "store"), log)
            try:
                with RecordingProxy(url) as proxy:
                    exits = RUNNERS[agent](proxy.url, root / "gateway", fake)
                    client = list(proxy.bodies)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            received = [(r.path, r.body, r.error) for r in fake.received]
            out["gateway"] = {
                "exit_codes": exits,
                "work_done": _work_done(agent, fake.default),
                "requests": figures(received, client, agent),
                "compacted_turns": _compacted_turns(log),
            }
        finally:
            fake.stop()
    return out


# ---------------------------------------------------------------------- the table


def summary(mode: dict[str, Any]) -> dict[str, Any]:
    reqs = mode["requests"]
    ok = [r for r in reqs if r["error"] is None]
    main = [r for r in ok if not r["side"]]
    cost = sum(CACHED_RATE * r["cached"] + (r["tokens"] - r["cached"]) for r in ok)
    return {
        "finished": all(code == 0 for code in mode["exit_codes"]) and mode.get("work_done", True),
        "requests": len(reqs),
        "refused": len(reqs) - len(ok),
        "input": sum(r["tokens"] for r in ok),
        "cost": round(cost),
        "compacted": mode.get("compacted_turns", 0),
        "agent_compacted": sum(r["client_compaction"] for r in reqs),
        "verbatim": round(statistics.median(r["verbatim"] for r in main)) if main else 0,
    }


def table(recordings: list[dict[str, Any]]) -> str:
    head = (
        "| agent | going | finished | requests (refused) | input tokens | cache-aware cost "
        "| cost vs direct | turns compacted | median tokens kept verbatim |"
    )
    rows = [head, "|" + "---|" * 9]
    for rec in recordings:
        direct = summary(rec["direct"])
        for going in ("direct", "gateway"):
            s = summary(rec[going])
            # a direct session that did not finish did less of the work: no ratio
            ratio = f"{s['cost'] / direct['cost']:.2f}" if direct["finished"] else "-"
            who = f"{s['agent_compacted']} by the agent"
            if going == "gateway":
                who = f"{s['compacted']} by the gateway, {who}"
            rows.append(
                f"| {rec['agent']} | {'direct' if going == 'direct' else 'contextfold serve'} "
                f"| {'yes' if s['finished'] else 'no'} | {s['requests']} ({s['refused']}) "
                f"| {s['input']:,} | {s['cost']:,} | {ratio} | {who} "
                f"| {s['verbatim']:,} |"
            )
    return "\n".join(rows)


def load() -> list[dict[str, Any]]:
    found = {p.stem: p for p in SESSIONS.glob("*.json")}
    return [json.loads(found[a].read_text()) for a in AGENTS if a in found]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.agent_cost")
    p.add_argument(
        "--record",
        nargs="*",
        metavar="AGENT",
        help=f"run the real agents again and rewrite the recordings ({', '.join(AGENTS)})",
    )
    args = p.parse_args(argv)
    if args.record is not None:
        SESSIONS.mkdir(parents=True, exist_ok=True)
        for agent in args.record or AGENTS:
            if agent not in RUNNERS:
                p.error(f"unknown agent {agent!r}: one of {', '.join(AGENTS)}")
            started = time.monotonic()
            rec = record(agent)
            (SESSIONS / f"{agent}.json").write_text(json.dumps(rec, indent=0) + "\n")
            print(f"recorded {agent} in {time.monotonic() - started:.0f} s")
    recordings = load()
    if not recordings:
        print(f"no recorded sessions in {SESSIONS}: run with --record")
        return 1
    print("Real agent sessions (recorded), direct to the scripted upstream and through")
    print("contextfold serve; cache-aware cost = 0.1 x cached prefix + 1.0 x the rest:\n")
    print(table(recordings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
