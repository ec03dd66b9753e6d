"""Gateway settings: defaults < TOML file < environment variables < command-line flags."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .edge import redact

ENV_PREFIX = "CONTEXTFOLD_GATEWAY_"


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``contextfold serve`` can be told."""

    #: The one provider base URL every request goes to (clients cannot change it).
    upstream: str = ""
    host: str = "127.0.0.1"
    port: int = 8787
    #: A workspace folder, or a ``postgresql://`` URL once the storage layer supports it.
    store: str = "./.contextfold"
    #: Context window used for models not listed in ``windows``.
    context_window: int = 128_000
    #: Per-model windows (exact model name -> tokens).
    windows: Mapping[str, int] = field(default_factory=dict)
    #: ContextManager preset name.
    preset: str | None = None
    #: "extractive" (no model call) or "upstream" (the upstream model writes the summaries).
    summarizer: str = "extractive"
    #: Model for the upstream summarizer; default: the model of the request.
    summary_model: str | None = None
    #: When set, clients must send ``Authorization: Bearer <token>`` or ``X-Contextfold-Token``.
    auth_token: str | None = None
    #: The session inspector at ``/ui`` shows every session of the store: its own token. With
    #: ``auth_token`` set (clients share the gateway) ``/ui`` is served only when this is set,
    #: and a client's gateway token does not open it; with neither, it is open to whoever
    #: reaches the gateway (127.0.0.1 by default).
    ui_token: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024
    #: Messages one request may carry (more: 413 before any work is done).
    max_messages: int = 10_000
    #: How deep a request body's arrays and objects may nest (deeper: 400 before parsing).
    max_depth: int = 128
    #: Bytes of a request's line and headers (more: the connection is closed).
    max_header_bytes: int = 64 * 1024
    #: Seconds a client has to send a request's headers, from connecting or from the first
    #: byte of a request on a kept-alive connection (a half-sent request is closed after it).
    header_timeout: float = 10.0
    #: Seconds an idle kept-alive client connection stays open.
    idle_timeout: float = 30.0
    #: Seconds the gateway may spend on one request before the upstream call (receiving the
    #: body, storing it, deriving the view): past it the client gets a 408 or 503.
    request_timeout: float = 30.0
    #: Seconds to wait for the upstream (connect and each read).
    upstream_timeout: float = 600.0
    #: Answer recall / read_offloaded inside the gateway.
    gateway_tools: bool = True
    #: Gateway tool rounds per request before the gateway stops answering them itself.
    max_tool_rounds: int = 4
    #: Managers kept open in memory (least recently used are closed first).
    max_open_sessions: int = 256
    #: Seconds an answer may wait before it is written to the store: the client's next request
    #: resends it, and it is then written together with the new messages (one store write per
    #: turn instead of two). Written at the latest after this delay, at shutdown, before the
    #: session is closed. 0: written as soon as the client has it.
    record_delay: float = 1.0
    #: Compact ahead: after an answer, while the agent runs its tool, compact the view when
    #: the next turn is expected to need it (its growth judged from the latest turns), so the
    #: next request finds its view ready. False: every compaction happens on a request's path.
    compact_ahead: bool = True
    #: Compute the semantic vectors of what compactions removed in a child process at the
    #: lowest CPU priority, after the answers: it never holds the serving process's
    #: interpreter lock, and the requests get the cores first. False: in a thread of the
    #: serving process. (Only with the ``semantic`` extra.)
    vectors_process: bool = True
    #: Server processes sharing the port and the store; 0 (the default): one per core this
    #: process may use, at most 8, when the store is a workspace folder or PostgreSQL (one
    #: for memory://, which a process cannot share). A conversation's requests on one kept-alive connection stay on one process; one that
    #: arrives at another process makes it reopen the session from the store (correct, but it
    #: reads the history again).
    workers: int = 0
    log_level: str = "info"

    def window_for(self, model: str) -> int:
        return int(self.windows.get(model, self.context_window))

    def check(self) -> GatewayConfig:
        if not self.upstream:
            raise ConfigError("the gateway needs an upstream URL (--upstream URL)")
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"upstream must be an http(s) URL, got {redact(self.upstream)!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        if not isinstance(self.workers, int) or not 0 <= self.workers <= 64:
            raise ConfigError(f"workers must be 0 (one per core) or 1..64, got {self.workers!r}")
        for name in (
            "context_window",
            "max_body_bytes",
            "max_open_sessions",
            "max_messages",
            "max_depth",
            "max_header_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        for model, window in self.windows.items():
            if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
                raise ConfigError(f"windows.{model} must be a positive integer, got {window!r}")
        if self.summarizer not in ("extractive", "upstream"):
            raise ConfigError(
                f"summarizer must be 'extractive' or 'upstream', got {self.summarizer!r}"
            )
        for name in ("upstream_timeout", "header_timeout", "idle_timeout", "request_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if not 0 <= self.record_delay <= 60:
            raise ConfigError(f"record_delay must be 0..60 seconds, got {self.record_delay!r}")
        if self.max_tool_rounds < 0:
            raise ConfigError("max_tool_rounds must be >= 0")
        if not self.store:
            raise ConfigError("store must be a folder or a postgresql:// URL")
        return self

    @property
    def upstream_base(self) -> str:
        return self.upstream.rstrip("/")

    @property
    def shown_upstream(self) -> str:
        """The upstream URL as logs and /healthz show it (no password, no secret query)."""
        return redact(self.upstream_base)

    @property
    def shown_store(self) -> str:
        """The store as logs show it (a database URL without its password)."""
        return redact(self.store)


_FIELDS = {f.name: f for f in fields(GatewayConfig)}


def _coerce(name: str, value: Any, where: str) -> Any:
    default = getattr(GatewayConfig(), name)
    if name == "windows":
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: windows must be a table of model = tokens")
        return {
            str(k): _coerce("context_window", v, f"{where}: windows.{k}") for k, v in value.items()
        }
    try:
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if isinstance(default, int):
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if isinstance(default, float):
            return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name} has a bad value {value!r}") from None
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be a string, got {value!r}")
    return value


def _toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ImportError:
            raise ConfigError(
                "reading a TOML config on Python 3.10 needs `pip install tomli`"
            ) from None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    section = data.get("gateway", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [gateway] must be a table")
    return section


def load_config(
    *,
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> GatewayConfig:
    """Build the config: defaults, then ``file`` (TOML, keys at top level or under
    ``[gateway]``), then ``CONTEXTFOLD_GATEWAY_<NAME>`` variables, then ``overrides`` (flags;
    None values are ignored)."""
    values: dict[str, Any] = {}
    environ = os.environ if env is None else env
    if file is None and environ.get(ENV_PREFIX + "CONFIG"):
        file = environ[ENV_PREFIX + "CONFIG"]
    if file is not None:
        for key, value in _toml(Path(file)).items():
            name = key.replace("-", "_")
            if name not in _FIELDS:
                raise ConfigError(f"config file {file}: unknown setting {key!r}")
            values[name] = _coerce(name, value, f"config file {file}")
    for name in _FIELDS:
        if name == "windows":
            continue
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _coerce(name, raw, f"${ENV_PREFIX}{name.upper()}")
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
    return replace(GatewayConfig(), **values).check()


__all__ = ["ENV_PREFIX", "GatewayConfig", "load_config"]
