"""Summarizers: the extractive default (no LLM) and LLM-backed ones."""

from .base import SummaryRequest, Summarizer

__all__ = ["SummaryRequest", "Summarizer"]
