"""The other processes of ``benchmarks.gateway_load``: the scripted upstream, the bare relay
(starlette + httpx, the floor of the stack the gateway is built on) and LiteLLM's proxy (set up
in its own virtual environment under ``.bench-venv/``, skipped with a note when the package
registry cannot be reached).

Run as ``python -m benchmarks.gateway_load_servers upstream PORT DELAY_MS`` or
``... relay PORT UPSTREAM_URL``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".bench-venv"
#: the LiteLLM release the comparison was measured with (``>=``: a newer one is fine)
LITELLM = "litellm[proxy]>=1.50"
#: the key the benchmark's agents send LiteLLM's proxy (local, for this run only)
MASTER_KEY = "sk-bench-litellm-master"


def upstream_app(delay: float) -> Any:
    """An OpenAI Chat Completions endpoint answering every call after ``delay`` seconds with one
    tool call (its id from ``x-bench-call``), without parsing the request (its own CPU stays
    out of the proxies' way); ``x-upstream-ms`` says how long it held the request."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def chat(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await request.body()
        call = request.headers.get("x-bench-call", "c0")
        await asyncio.sleep(delay)
        held = (time.perf_counter() - t0) * 1000
        answer = {
            # the time held in the id too: a proxy that drops the header keeps the id
            "id": f"chatcmpl-{call}-held-{held:.3f}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "gpt-bench",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call,
                                "type": "function",
                                "function": {"name": "run", "arguments": '{"cmd": "make test"}'},
                            }
                        ],
                    },
                }
            ],
            "usage": {
                "prompt_tokens": len(body) // 4,
                "completion_tokens": 12,
                "total_tokens": len(body) // 4 + 12,
            },
        }
        return JSONResponse(answer, headers={"x-upstream-ms": f"{held:.3f}"})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "gpt-bench", "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


def relay_app(upstream: str) -> Any:
    """The bare relay: the body and headers passed to the upstream with one pooled httpx
    client, its answer passed back (what any proxy on this stack does at the least)."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=upstream, timeout=60, trust_env=False)
    drop = {"host", "content-length", "connection", "accept-encoding"}

    async def chat(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k not in drop}
        resp = await client.post("/v1/chat/completions", content=body, headers=headers)
        keep = {k: v for k, v in resp.headers.items() if k in ("content-type", "x-upstream-ms")}
        return Response(resp.content, resp.status_code, headers=keep)

    async def health(request: Request) -> Response:
        return Response("ok")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ]
    )


def serve(app: Any, port: int) -> None:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---------------------------------------------------------------------- LiteLLM


def litellm_exe() -> Path:
    return VENV / "bin" / "litellm"


def setup_litellm(log: Any = print) -> str | None:
    """LiteLLM's proxy in ``.bench-venv/`` (created once, kept: the folder is ignored by git).
    Returns None when ready, else the reason it is skipped."""
    if litellm_exe().is_file():
        return None
    log(f"setting up LiteLLM's proxy in {VENV} (once; pip install '{LITELLM}')")
    try:
        if not (VENV / "bin" / "python").is_file():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        pip = [
            str(VENV / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
        ]
        done = subprocess.run(
            [*pip, LITELLM], capture_output=True, text=True, timeout=1800, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"LiteLLM could not be installed: {exc}"
    if done.returncode != 0 or not litellm_exe().is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"LiteLLM could not be installed (is the package registry reachable?): {tail[0]}"
    return None


def litellm_config(folder: Path, upstream: str) -> Path:
    """A proxy configuration with one model on the scripted upstream (OpenAI-compatible)."""
    cfg = {
        "model_list": [
            {
                "model_name": "gpt-bench",
                "litellm_params": {
                    "model": "openai/gpt-bench",
                    "api_base": f"{upstream}/v1",
                    "api_key": "sk-bench",
                },
            }
        ],
        "litellm_settings": {"drop_params": True, "telemetry": False},
        # its clients authenticate with the master key (it refuses to start without one)
        "general_settings": {"disable_spend_logs": True, "master_key": MASTER_KEY},
    }
    path = folder / "litellm.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    # LiteLLM reads YAML; JSON is YAML
    return path


def litellm_cmd(config: Path, port: int) -> tuple[list[str], dict[str, str]]:
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DISABLE_SCHEMA_UPDATE": "True",
    }
    env.pop("PYTHONPATH", None)
    cmd = [str(litellm_exe()), "--config", str(config), "--port", str(port), "--host", "127.0.0.1"]
    return cmd, env


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "upstream":
        serve(upstream_app(float(sys.argv[3]) / 1000), port)
    elif kind == "relay":
        serve(relay_app(sys.argv[3]), port)
    else:
        raise SystemExit(f"unknown server {kind!r}")
