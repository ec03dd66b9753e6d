"""The session engine: one open session (:class:`~contextfold.engine.context.SessionContext`)
and the steps that work on it - opening (:mod:`.opening`), ingest (:mod:`.ingest`), prepare
(:mod:`.prepare`) and overflow handling (:mod:`.overflow`). The
:class:`~contextfold.ContextManager` is the facade over it: the public API, the lock and the
units of work; its calls of each kind are mixins over the context (:mod:`.parts` the session's
parts as attributes, :mod:`.ingest_calls`, :mod:`.view_calls`, :mod:`.calls`,
:mod:`.async_calls`)."""
