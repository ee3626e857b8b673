"""The shapes world's vocabulary: 8 colours x 4 shapes = 32 events, and how people name them.

The world (see ``docs/shapes-world.md``) is a small visual language in which a tiny backbone can
learn to see on a CPU, so that retrieval quality is measurable without real weights. Everything
that names an event (the renderer's ground truth, training texts, benchmark queries, the demo's
suggestions) goes through this module, so that one phrasing rule holds everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

# Nominal RGB of each colour; a renderer may move each channel by up to COLOUR_JITTER.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 35, 35),
    "green": (40, 200, 60),
    "blue": (45, 75, 230),
    "yellow": (235, 220, 40),
    "magenta": (215, 50, 200),
    "cyan": (40, 210, 220),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
}
COLOUR_JITTER = 20
# "bar" is a horizontal rectangle about 3:1; "triangle" has its apex up.
SHAPES: tuple[str, ...] = ("square", "circle", "triangle", "bar")
# A pixel is grey (haystack) when its channels are within about this much of each other.
GREY_SPREAD = 12
# An event's size (side, diameter, or bar height x 3) as a fraction of the frame's short side.
EVENT_SIZE = (0.15, 0.45)
MIN_EVENT_S = 1.0  # an event stays visible at least this long

# What a user may type for one event; {a} is the article ("an" before "orange").
PHRASINGS: tuple[str, ...] = (
    "{a} {name} appears",
    "{a} {name}",
    "{name} shows up briefly",
    "there is {a} {name}",
)
# Two events in order: both forms must work.
ORDER_PHRASINGS: tuple[str, ...] = (
    "{a1} {n1} appears, then {a2} {n2} appears",
    "first {a1} {n1} appears, then {a2} {n2} appears",
)
# One event shown once or twice (the two showings at least COUNT_GAP_S apart, haystack between):
# the phrasings of each count.
COUNT_PHRASINGS: dict[int, tuple[str, ...]] = {
    1: ("{a} {name} appears once", "{a} {name} appears only once"),
    2: ("{a} {name} appears twice", "{a} {name} appears two times"),
}
COUNT_GAP_S = 20.0  # haystack between the end of a twice-shown event's first showing and its second


@dataclass(frozen=True, order=True)
class EventKind:
    colour: str
    shape: str

    def __post_init__(self) -> None:
        if self.colour not in COLOURS:
            raise ValueError(f"unknown colour {self.colour!r}; the world has {sorted(COLOURS)}")
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}; the world has {list(SHAPES)}")

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"

    @property
    def article(self) -> str:
        return "an" if self.colour[0] in "aeiou" else "a"

    @property
    def index(self) -> int:
        """Position in :data:`EVENTS` (0..31)."""
        return list(COLOURS).index(self.colour) * len(SHAPES) + SHAPES.index(self.shape)

    def text(self, phrasing: int = 0) -> str:
        """The event as a user would type it (phrasing 0: "a red square appears")."""
        return PHRASINGS[phrasing % len(PHRASINGS)].format(a=self.article, name=self.name)


EVENTS: tuple[EventKind, ...] = tuple(EventKind(c, s) for c in COLOURS for s in SHAPES)


def order_text(first: EventKind, second: EventKind, phrasing: int = 0) -> str:
    """ "a red square appears, then a blue circle appears" (phrasing 1: "first ..., then ...")."""
    return ORDER_PHRASINGS[phrasing % len(ORDER_PHRASINGS)].format(
        a1=first.article, n1=first.name, a2=second.article, n2=second.name
    )


def count_text(kind: EventKind, times: int, phrasing: int = 0) -> str:
    """ "a red square appears twice" (times 2; phrasing 1: "... appears two times"), "a red square
    appears once" (times 1; phrasing 1: "... appears only once")."""
    if times not in COUNT_PHRASINGS:
        raise ValueError(f"the world counts showings {sorted(COUNT_PHRASINGS)}, got {times!r}")
    forms = COUNT_PHRASINGS[times]
    return forms[phrasing % len(forms)].format(a=kind.article, name=kind.name)


def parse_event(name: str) -> EventKind:
    """ "red square" -> EventKind("red", "square")."""
    parts = name.strip().split()
    if len(parts) != 2:
        raise ValueError(f"an event is named '<colour> <shape>', got {name!r}")
    return EventKind(parts[0], parts[1])
