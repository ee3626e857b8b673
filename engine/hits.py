"""Older name of :mod:`engine.results` (the result types' leaf module), kept for callers outside
the engine that still import from here."""

from engine.results import EvidenceItem, Hit

__all__ = ["EvidenceItem", "Hit"]
