"""What makes compaction recoverable: recovery hooks, memory, past sessions."""
