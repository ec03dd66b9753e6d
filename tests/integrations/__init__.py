"""Tests of integrations."""
