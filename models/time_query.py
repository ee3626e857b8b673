"""What a query asks about time, read from its words: an order of events or how often one happens.

    "a red square appears, then a blue circle appears"     -> order  ("a red square appears",
    "first a red square appears, then a blue circle ..."       "a blue circle appears")
    "a red square appears before a blue circle"            -> order  (red square, blue circle)
    "a red square appears after a blue circle"             -> order  (blue circle, red square)
    "a red square appears and afterwards / next a blue ..." -> order  (red square, blue circle)
    "a blue circle appears, preceded by a red square"      -> order  (red square, blue circle)
    "a blue circle appears, following a red square"        -> order  (red square, blue circle)
    "a red square is followed by / appears prior to a blue circle" -> order (red square, blue circle)
    "a red square appears, and a blue circle ... later"    -> order  (red square, blue circle)
    "a red square appears twice" / "... two (separate) times" / "... on two occasions"
                                                           -> count 2 of "a red square appears"
    "a red square appears once" / "... only once"          -> count 1

The time head (:mod:`models.time_head`) embeds each event phrase on its own with the backbone and
streams a video's frames against them: a text embedding of the whole sentence hardly tells
"A then B" from "B then A" (cosine 0.94 with the tiny-world backbone) or "once" from "twice"
(0.99), while each event phrase alone is what the backbone was trained to see. English phrasings
only; anything else parses to None and is searched as a plain description.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TimeQuery", "parse_time_query"]

_COUNT_WORDS = {
    "once": 1, "one time": 1, "1 time": 1,
    "twice": 2, "two times": 2, "2 times": 2,
    "thrice": 3, "three times": 3, "3 times": 3,
    "four times": 4, "4 times": 4,
}  # fmt: skip
_COUNT = re.compile(
    r"^(?P<event>.+?)[\s,]+(?:(?:only|exactly|just)\s+)?(?P<n>"
    + "|".join(sorted((re.escape(w) for w in _COUNT_WORDS), key=len, reverse=True))
    + r")(?:\s+in\s+(?:the|this|a|total)(?:\s+video)?)?$"
)
# "two separate / different / distinct times", "on two occasions": "two times"
_COUNT_FORMS = (
    (re.compile(r"\b(one|two|three|four|[1-4])\s+(?:separate|different|distinct)\s+times\b"), r"\1 times"),
    (re.compile(r"\bon\s+(one|two|three|four|[1-4])\s+(?:separate\s+)?occasions?\b"), r"\1 times"),
)
# "A, then B", "A and then B", "A, followed by B", "A is followed by B", "A before B", "A prior to B", "A
# earlier than B", "A and afterwards B", "A, next B" (not "next to"), "A, after that B"; a leading "first"
# is dropped
_THEN = re.compile(
    r"(?:\s*(?:,\s*|\s)(?:and\s+)?(?:then|(?:(?:is|was|are|were|gets|got)\s+)?followed\s+by|before"
    r"|prior\s+to|earlier\s+than|and\s+later|later(?!\s+than\b)|afterwards?|after\s+that|subsequently)"
    r"|\s*(?:,\s*(?:and\s+)?|\s+and\s+)next(?!\s+to\b))\s+"
)  # "next" only after a comma or "and": "the next video shows ..." is no order
# "A, and B later (on)" / "A and B afterwards": the second event's adverb at the end
_TRAIL = re.compile(
    r"^(?P<first>.+?),?\s+and\s+(?P<second>.+?)\s+(?:later(?:\s+on)?|afterwards?|after\s+that)$"
)
_LATER_ON = re.compile(r"\s+later\s+on$")
# "B, preceded by A", "B, following A", "B following a / an / the A" (not "the following video ...")
_BACK = re.compile(
    r"^(?P<second>.+?)(?:(?:,\s*|\s+)preceded\s+by|,\s*following|(?<!\bthe)\s+following(?=\s+(?:an?|the)\s))"
    r"\s+(?P<first>.+)$"
)
_AFTER_LEAD = re.compile(r"^after\s+(?P<first>.+?),\s*(?:then\s+)?(?P<second>.+)$")
_AFTER_MID = re.compile(r"^(?P<second>.+?)\s+(?:after|later\s+than)\s+(?P<first>.+)$")
_FIRST = re.compile(r"^(?:at\s+)?first[\s,]+")
_TRIM = " \t\n.,;:!?\"'"


@dataclass(frozen=True)
class TimeQuery:
    """``kind`` "order": ``events`` must show in this order; "count": ``events[0]`` shows ``count``
    separate times."""

    kind: str
    events: tuple[str, ...]
    count: int | None = None

    @property
    def condition(self) -> str:
        """The head's conditioning name: "order", or "count:N"."""
        return "order" if self.kind == "order" else f"count:{self.count}"


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip(_TRIM)).strip(_TRIM)


def parse_time_query(text: str | None) -> TimeQuery | None:
    """The order or count ``text`` asks for (module docstring), or None for a plain description."""
    if not text:
        return None
    t = _clean(text.lower())
    counted = t
    for form, plain in _COUNT_FORMS:
        counted = form.sub(plain, counted)
    m = _COUNT.match(counted)
    if m and _clean(m.group("event")):
        event = _FIRST.sub("", _clean(m.group("event")))
        if not _THEN.search(event):  # "A then B twice" is no single count
            return TimeQuery("count", (event,), _COUNT_WORDS[m.group("n")])
    m = _AFTER_LEAD.match(t) or _TRAIL.match(t)
    if m is None:
        t = _LATER_ON.sub("", t)  # "A, then B later on": the adverb is no event
        if not _THEN.search(t):  # "B after A", "B, preceded by A"
            m = _AFTER_MID.match(t) or _BACK.match(t)
    if m is not None:
        events = (_clean(m.group("first")), _clean(m.group("second")))
    else:
        events = tuple(_clean(part) for part in _THEN.split(_FIRST.sub("", t)))
    events = tuple(_FIRST.sub("", e) for e in events if e)
    if len(events) < 2:
        return None
    return TimeQuery("order", events)
