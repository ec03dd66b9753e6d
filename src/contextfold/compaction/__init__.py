"""The compactors: progressive (tiered) compaction, the harness strategies, and their parts."""
