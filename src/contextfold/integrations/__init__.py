"""Drop-in integrations for agent frameworks. Import the submodule for your stack; each one
imports its framework lazily, so ``import contextfold`` never needs them:

* ``contextfold.integrations.langchain.ContextFoldMiddleware``: LangChain v1 ``create_agent``
  middleware (the ``langchain`` extra).
* ``contextfold.integrations.openai_agents``: OpenAI Agents SDK model wrapper, input filter and
  ``Session`` (the ``openai-agents`` extra).
* ``contextfold.integrations.pydantic_ai.ContextFoldCapability``: pydantic-ai capability
  (the ``pydantic-ai`` extra).

How contextfold's log relates to each framework's own history is described in
``contextfold.integrations._common``: the framework's history stays the source the loop sees,
contextfold's log mirrors it append-only, and the model receives contextfold's view.
"""

from ._common import HistoryDivergedError

__all__ = ["HistoryDivergedError"]
