"""Tests of inspector."""
