"""``contextfold serve``: compaction and recall for any agent, behind an HTTP endpoint.

Needs the ``gateway`` extra (``pip install '.[gateway]'`` in the checkout: Starlette, uvicorn, httpx).
Importing :mod:`contextfold` never imports this package.
"""

from __future__ import annotations

from .config import GatewayConfig, load_config

__all__ = ["GatewayConfig", "load_config"]
