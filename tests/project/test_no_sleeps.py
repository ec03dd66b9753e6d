"""Tests wait on events, a condition or a fake clock, never on a bare sleep.

Every ``sleep(...)`` call in ``tests/`` (``time.sleep``, ``asyncio.sleep``, ``anyio.sleep`` ...)
must be one of the explicit delays below: ``tests/support/waiting.py``'s bounded poll, or a named delay
of a scripted fake or a test whose subject is timing (a slow upstream for a timeout, a kill at a
random point). ``asyncio.sleep(0)`` only yields to the event loop and is always allowed. A new
sleep fails here: wait with ``tests.support.waiting.wait_until`` or on an event the code signals.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: file -> the argument of each sleep allowed there, and why it is not a wait
ALLOWED: dict[str, dict[str, str]] = {
    "support/waiting.py": {"delay": "wait_until's poll interval, bounded by its deadline"},
    "support/http_fakes.py": {
        "step.delay": "a scripted step's delay (a slow server is the subject)"
    },
    "gateway/gateway_fakes.py": {
        "first": "the fake model's latency before its first event",
        "event_delay": "a scripted pause between stream events",
        "until_due": "paces the stream's events over the fake model's latency",
        "latency": "the fake model's latency for a whole answer",
        "delay": "a scripted delay of one reply",
    },
    "support/pg_support.py": {"delay": "worker processes start together at an agreed moment"},
    "gateway/test_gateway_netio.py": {
        "CHUNK_GAP": "a slow stream, so each event is a chunk of its own",
        "SILENT_FOR": "a server silent past the client's read timeout (the timeout is tested)",
    },
    "storage/test_storage_faults.py": {"kill_after": "a kill at a random point is what is tested"},
    "engine/test_async_loop.py": {"TICK": "a ticker that proves the loop runs while a call waits"},
}


def _sleeps(path: Path) -> list[tuple[int, str]]:
    """``(line, argument source)`` of each sleep call in ``path``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "sleep":
            continue
        arg = ast.unparse(node.args[0]) if node.args else ""
        if arg in {"0", "0.0"}:  # yields to the event loop, waits for nothing
            continue
        found.append((node.lineno, arg))
    return sorted(found)


def bare_sleeps(root: Path = TESTS) -> list[str]:
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        allowed = ALLOWED.get(rel, {})
        out.extend(
            f"{rel}:{line}: sleep({arg})" for line, arg in _sleeps(path) if arg not in allowed
        )
    return out


def test_no_bare_sleep_in_the_tests() -> None:
    found = bare_sleeps()
    assert not found, (
        "a test sleeps instead of waiting (use tests.support.waiting.wait_until, an event, or a named "
        "delay listed in tests/project/test_no_sleeps.py with its reason):\n  " + "\n  ".join(found)
    )


def test_every_allowed_delay_is_still_there() -> None:
    """The allow-list names only sleeps that exist, so it cannot quietly grow stale."""
    for rel, allowed in ALLOWED.items():
        present = {arg for _, arg in _sleeps(TESTS / rel)}
        assert set(allowed) <= present, f"{rel}: no longer sleeps on {set(allowed) - present}"


def test_the_check_finds_a_bare_sleep(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "import asyncio, time\n"
        "from time import sleep\n"
        "def test_a():\n    time.sleep(0.1)\n"
        "async def test_b():\n    await asyncio.sleep(0)\n    await asyncio.sleep(0.5)\n"
        "def test_c():\n    sleep(2)\n",
        encoding="utf-8",
    )
    assert bare_sleeps(tmp_path) == [
        "test_sample.py:4: sleep(0.1)",
        "test_sample.py:7: sleep(0.5)",
        "test_sample.py:9: sleep(2)",
    ]
