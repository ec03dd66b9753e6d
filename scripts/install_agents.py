#!/usr/bin/env python3
"""Install the real coding agents the agent tests drive through ``contextfold serve``.

Pinned versions go into a cache folder outside the checkout, so a fresh clone reuses them:
``$CONTEXTFOLD_AGENT_CACHE`` (default ``~/.cache/contextfold/agents``). The npm agents are
installed with ``npm install --prefix``; the PyPI agents each get a virtualenv of their own (their
pins conflict with contextfold's and with each other's). A stamp file per version makes a second
run instant. A failed install is reported, and its reason kept next to the stamp so the tests can
name it; the script still exits 0 unless ``--strict`` (the tests decide: a skip, or a failure
under ``CONTEXTFOLD_REQUIRE_ALL=1``).

    python3 scripts/install_agents.py            # install what is missing
    python3 scripts/install_agents.py --list     # where each agent is, or why it is not
    python3 scripts/install_agents.py aider      # only some agents
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Agent:
    name: str
    kind: str  # "npm" or "pypi"
    package: str
    version: str
    command: str  # the program the tests run

    @property
    def folder(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"

    @property
    def stamp(self) -> Path:
        return self.folder / ".installed"

    @property
    def failure(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}.failed"

    @property
    def executable(self) -> Path:
        if self.kind == "npm":
            return self.folder / "node_modules" / ".bin" / self.command
        return self.folder / "bin" / self.command


AGENTS: dict[str, Agent] = {
    a.name: a
    for a in (
        Agent("claude-code", "npm", "@anthropic-ai/claude-code", "2.1.332", "claude"),
        Agent("codex", "npm", "@openai/codex", "0.169.0", "codex"),
        Agent("gemini-cli", "npm", "@google/gemini-cli", "0.61.0", "gemini"),
        Agent("aider", "pypi", "aider-chat", "0.86.2", "aider"),
        Agent("mini-swe-agent", "pypi", "mini-swe-agent", "2.4.6", "mini"),
    )
}


def cache_root() -> Path:
    raw = os.environ.get("CONTEXTFOLD_AGENT_CACHE")
    return Path(raw) if raw else Path.home() / ".cache" / "contextfold" / "agents"


def installed(agent: Agent) -> Path | None:
    """The agent's program if its pinned version is installed, else None."""
    return agent.executable if agent.stamp.is_file() and agent.executable.exists() else None


def missing_reason(agent: Agent) -> str:
    """Why the agent cannot be run: the install's own error, or that it was never installed."""
    if agent.failure.is_file():
        return (
            f"{agent.package} {agent.version} failed to install into {agent.folder}: "
            + agent.failure.read_text(encoding="utf-8", errors="replace")[-1500:]
        )
    return (
        f"{agent.package} {agent.version} is not installed in {cache_root()}: "
        "run `make agents` (python3 scripts/install_agents.py)"
    )


def _python() -> str:
    """A Python for the agents' virtualenvs: aider and mini-swe-agent need 3.10 to 3.12."""
    if (3, 10) <= sys.version_info[:2] <= (3, 12):
        return sys.executable
    for name in ("python3.12", "python3.11", "python3.10"):
        found = shutil.which(name)
        # a pyenv shim is on PATH even when its version is not selected: try it
        if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:
            return found
    return sys.executable


def _commands(agent: Agent) -> list[list[str]]:
    if agent.kind == "npm":
        npm = shutil.which("npm") or "npm"
        spec = f"{agent.package}@{agent.version}"
        base = [npm, "install", "--prefix", str(agent.folder), "--no-audit", "--no-fund"]
        return [[*base, "--loglevel=error", "--ignore-scripts=false", spec]]
    pip = str(agent.folder / "bin" / "python")
    return [
        [_python(), "-m", "venv", str(agent.folder)],
        [pip, "-m", "pip", "install", "-q", f"{agent.package}=={agent.version}"],
    ]


def install(agent: Agent) -> bool:
    if installed(agent):
        print(f"  {agent.name} {agent.version}: present ({agent.executable})")
        return True
    if agent.folder.exists():
        shutil.rmtree(agent.folder)  # a half-finished install from an earlier run
    agent.folder.mkdir(parents=True)
    agent.failure.unlink(missing_ok=True)
    print(f"  {agent.name} {agent.version}: installing {agent.package} ...", flush=True)
    start = time.monotonic()
    for command in _commands(agent):
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            reason = f"`{' '.join(command)}` exited {proc.returncode}\n{proc.stderr[-3000:]}"
            agent.failure.write_text(reason, encoding="utf-8")
            print(f"  {agent.name} {agent.version}: FAILED to install: {reason}", flush=True)
            return False
    if not agent.executable.exists():
        reason = f"installed, but {agent.executable} is missing"
        agent.failure.write_text(reason, encoding="utf-8")
        print(f"  {agent.name} {agent.version}: FAILED: {reason}", flush=True)
        return False
    agent.stamp.write_text(f"{agent.package}=={agent.version}\n", encoding="utf-8")
    print(f"  {agent.name} {agent.version}: installed in {time.monotonic() - start:.0f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"agents to install (default all: {list(AGENTS)})")
    parser.add_argument("--list", action="store_true", help="say where each agent is and stop")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any install failed")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in AGENTS]
    if unknown:
        parser.error(f"unknown agent(s) {unknown}; known: {list(AGENTS)}")
    chosen = [AGENTS[n] for n in args.names or AGENTS]
    if args.list:
        for agent in chosen:
            path = installed(agent)
            print(f"{agent.name}: {path or missing_reason(agent)}")
        return 0
    print(f"agents for the tests, in {cache_root()}:")
    failed = [a.name for a in chosen if not install(a)]
    if failed:
        print(f"could not install: {', '.join(failed)} (their tests skip, or fail in CI)")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
