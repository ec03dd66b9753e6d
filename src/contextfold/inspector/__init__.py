"""The session inspector: a web page over a store that shows what the model saw.

``contextfold ui --store FOLDER_OR_URL`` serves it on 127.0.0.1; the gateway mounts it at
``/ui`` behind its token. It lists the sessions, shows one session as a timeline of model
calls (tokens of the full history and of the view) with every compaction's record, the view
at any call next to the full history, and brings back the exact bytes of what left the view.
Needs the gateway extra (Starlette, uvicorn).
"""

from __future__ import annotations

#: the port ``contextfold ui`` listens on by default (on 127.0.0.1)
DEFAULT_PORT = 8766

__all__ = ["DEFAULT_PORT"]
