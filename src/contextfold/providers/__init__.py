"""LLM providers: responses, chat adapters, LLM clients, learned limits."""
