"""Drop-in integrations for agent frameworks. Import the submodule for your stack; each one
imports its framework lazily, so ``import contextfold`` never needs them:

* ``contextfold.integrations.langchain.ContextFoldMiddleware``: LangChain v1 ``create_agent``
  middleware (``pip install 'contextfold[langchain]'``).
* ``contextfold.integrations.openai_agents``: OpenAI Agents SDK model wrapper, input filter and
  ``Session`` (``pip install 'contextfold[openai-agents]'``).
* ``contextfold.integrations.pydantic_ai.ContextFoldCapability``: pydantic-ai capability
  (``pip install 'contextfold[pydantic-ai]'``).

How contextfold's log relates to each framework's own history is described in
``contextfold.integrations._common``: the framework's history stays the source the loop sees,
contextfold's log mirrors it append-only, and the model receives contextfold's view.
"""

from ._common import HistoryDivergedError

__all__ = ["HistoryDivergedError"]
