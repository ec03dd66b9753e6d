"""Summarizers: the extractive default (no LLM) and LLM-backed ones."""

from .base import Summarizer, SummaryRequest

__all__ = ["Summarizer", "SummaryRequest"]
