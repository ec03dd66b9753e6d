"""Tests of compaction."""
