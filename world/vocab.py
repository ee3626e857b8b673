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
# Two events in order, {a1} {n1} first: every form must work.
ORDER_PHRASINGS: tuple[str, ...] = (
    "{a1} {n1} appears, then {a2} {n2} appears",
    "first {a1} {n1} appears, then {a2} {n2} appears",
    "{a2} {n2} appears after {a1} {n1} appears",
    "{a1} {n1} appears before {a2} {n2} appears",
)
ORDER_GAP_S = (3.0, 60.0)  # haystack between the first event's end and the second's start
# One event shown once, twice or three times (showings at least COUNT_GAP_S apart, haystack between):
# the phrasings of each count.
COUNT_PHRASINGS: dict[int, tuple[str, ...]] = {
    1: ("{a} {name} appears once", "{a} {name} appears only once"),
    2: ("{a} {name} appears twice", "{a} {name} appears two times"),
    3: ("{a} {name} appears three times",),
}
COUNT_GAP_S = 8.0  # haystack between the end of one showing of a counted event and the next

# Motion and change: what no single frame shows. A changing event lasts CHANGE_S and is one of
# these; each has a time reversal (CHANGE_REVERSAL). A moving shape travels at least MOVE_TRAVEL of
# the frame's width (or height); a growing or shrinking one changes size by at least GROW_FACTOR.
MOVES: tuple[str, ...] = ("right", "left", "down", "up")
CHANGES: tuple[str, ...] = (*MOVES, "grow", "shrink", "recolour")
CHANGE_REVERSAL: dict[str, str] = {
    "right": "left", "left": "right", "down": "up", "up": "down", "grow": "shrink", "shrink": "grow",
    "recolour": "recolour",
}  # fmt: skip
CHANGE_S = (3.0, 6.0)
MOVE_TRAVEL = 0.5
GROW_FACTOR = 2.0
STATIC_DRIFT = 0.1  # a static event drifts at most this share of the short side during its showing
# What a user may type for each change; {a} {name} as for an event, {shape} {c1} {c2} for a colour change.
CHANGE_PHRASINGS: dict[str, tuple[str, ...]] = {
    "right": ("{a} {name} moves from left to right", "{a} {name} moves to the right"),
    "left": ("{a} {name} moves from right to left", "{a} {name} moves to the left"),
    "down": ("{a} {name} moves from top to bottom", "{a} {name} moves down"),
    "up": ("{a} {name} moves from bottom to top", "{a} {name} moves up"),
    "grow": ("{a} {name} grows", "{a} {name} gets bigger"),
    "shrink": ("{a} {name} shrinks", "{a} {name} gets smaller"),
    "recolour": ("a {shape} turns from {c1} to {c2}", "a {shape} changes from {c1} to {c2}"),
}


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


def order_text(
    first: EventKind, second: EventKind, phrasing: int = 0, *, phrasings: tuple[str, ...] = ORDER_PHRASINGS
) -> str:
    """ "a red square appears, then a blue circle appears" (phrasing 1: "first ..., then ...";
    2: "a blue circle appears after a red square appears"; 3: "a red square appears before ...")."""
    return phrasings[phrasing % len(phrasings)].format(
        a1=first.article, n1=first.name, a2=second.article, n2=second.name
    )


def count_text(kind: EventKind, times: int, phrasing: int = 0) -> str:
    """ "a red square appears twice" (times 2; phrasing 1: "... appears two times"), "a red square
    appears once" (times 1; phrasing 1: "... appears only once"), "... appears three times" (3)."""
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


@dataclass(frozen=True, order=True)
class Change:
    """A changing event: ``kind`` (its shape, in its colour when it begins) and what happens to it
    (one of :data:`CHANGES`; ``to_colour`` for "recolour")."""

    kind: EventKind
    change: str
    to_colour: str | None = None

    def __post_init__(self) -> None:
        if self.change not in CHANGES:
            raise ValueError(f"unknown change {self.change!r}; the world has {list(CHANGES)}")
        if (self.change == "recolour") != (self.to_colour is not None):
            raise ValueError("a colour change (and only it) names the colour it turns to")
        if self.to_colour is not None and (
            self.to_colour not in COLOURS or self.to_colour == self.kind.colour
        ):
            raise ValueError(f"a colour change turns to another world colour, got {self.to_colour!r}")

    def reversed(self) -> Change:
        """The same event played backwards (left <-> right, up <-> down, grow <-> shrink, a -> b <-> b -> a)."""
        if self.change == "recolour":
            return Change(EventKind(self.to_colour, self.kind.shape), "recolour", self.kind.colour)
        return Change(self.kind, CHANGE_REVERSAL[self.change])

    @property
    def name(self) -> str:
        """ "red square moves right", "square turns red to blue" (ground truth, titles)."""
        if self.change == "recolour":
            return f"{self.kind.shape} turns {self.kind.colour} to {self.to_colour}"
        if self.change in MOVES:
            return f"{self.kind.name} moves {self.change}"
        return f"{self.kind.name} {self.change}s"

    def text(self, phrasing: int = 0) -> str:
        """The change as a user would type it (phrasing 0: "a red square moves from left to right")."""
        forms = CHANGE_PHRASINGS[self.change]
        return forms[phrasing % len(forms)].format(
            a=self.kind.article,
            name=self.kind.name,
            shape=self.kind.shape,
            c1=self.kind.colour,
            c2=self.to_colour,
        )


def change_texts(change: Change) -> tuple[str, ...]:
    """Every phrasing of ``change``."""
    return tuple(change.text(p) for p in range(len(CHANGE_PHRASINGS[change.change])))
