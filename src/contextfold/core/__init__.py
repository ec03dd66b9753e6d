"""The data model every layer shares: messages, the view, tokens, config, records."""
