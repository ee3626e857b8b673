"""Whether a query asks about time: an order ("first ..., then ...") or a count ("twice").

The frame tier scores each candidate by its best frames, one frame at a time, so it cannot tell a
video from its mirror (A then B / B then A) or one showing from two: its lead on such a query says
nothing. The cascade (engine.search.cascade) therefore sends a query that asks about time to a streaming
head even when the frame tier's first two scores lie far apart; a one-shot heavy tier pools frames
and is as blind to time, so it is not asked. English words only: a query in another language goes
by the margin rule alone.
"""

from __future__ import annotations

import re

__all__ = ["asks_for_time"]

# order: a sequence of events; count: how often one happens
_TIME_WORDS = re.compile(
    r"\b(then|before|after|afterwards|first|second|later|followed|until|once|twice|thrice|again|times)\b",
    re.IGNORECASE,
)


def asks_for_time(query: str | None) -> bool:
    """True when ``query`` names an order or a count (see the module docstring)."""
    return bool(query) and _TIME_WORDS.search(query) is not None
