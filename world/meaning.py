"""What a world query means, and which videos it is true of.

A query of the world asks for one of four things (``Meaning.kind``):

    event    an event shows ("a red square appears")                 true of every video showing it
    order    one event shows, later another ("A, then B")            true of videos showing A, then B
    count    an event shows exactly n times ("... appears twice")    true of videos showing it n times
    change   an event changes so ("a red square moves to the right") true of videos showing that change

A corpus's truth names one right video per query; over a whole collection other videos may be right
too (a single video showing a red square once answers "a red square appears once"). Benchmarks and
training score a ranking against :meth:`Meaning.true_of`, so a video that is as right as the one a
query was written for is not counted as a miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from world.corpus import TruthVideo
from world.vocab import (
    CHANGE_PHRASINGS,
    COUNT_PHRASINGS,
    MOVES,
    ORDER_PHRASINGS,
    PHRASINGS,
    Change,
    EventKind,
    count_text,
    order_text,
    parse_event,
)

KINDS = ("event", "order", "count", "change")


@dataclass(frozen=True)
class Meaning:
    kind: str  # one of KINDS
    events: tuple[str, ...] = ()  # event names ("red square"): event (1), order (first, second), count (1)
    count: int = 0  # count: how many showings
    change: str = ""  # change: the change's name (world.vocab.Change.name)

    def texts(self) -> tuple[str, ...]:
        """Every phrasing of this meaning in the world's texts."""
        if self.kind == "event":
            kind = parse_event(self.events[0])
            return tuple(kind.text(p) for p in range(len(PHRASINGS)))
        if self.kind == "order":
            a, b = (parse_event(e) for e in self.events)
            return tuple(order_text(a, b, p) for p in range(len(ORDER_PHRASINGS)))
        if self.kind == "count":
            kind = parse_event(self.events[0])
            return tuple(count_text(kind, self.count, p) for p in range(len(COUNT_PHRASINGS[self.count])))
        change = parse_change(self.change)
        return tuple(change.text(p) for p in range(len(CHANGE_PHRASINGS[change.change])))

    def true_of(self, video: TruthVideo) -> bool:
        """Whether ``video`` shows what this meaning asks for."""
        shown = [name for name, _, _ in sorted(video.events, key=lambda e: e[1])]
        if self.kind == "event":
            return self.events[0] in shown_names(video)
        if self.kind == "order":
            a, b = self.events
            return a in shown and b in shown[shown.index(a) + 1 :]
        if self.kind == "count":
            return not video.change and shown.count(self.events[0]) == self.count
        return video.change == self.change


def shown_names(video: TruthVideo) -> set[str]:
    """Every event (colour and shape) the video shows, a colour change's both colours included."""
    names = {name for name, _, _ in video.events}
    if video.change:
        change = parse_change(video.change)
        if change.to_colour is not None:
            names.add(EventKind(change.to_colour, change.kind.shape).name)
    return names


def parse_change(name: str) -> Change:
    """ "red square moves right" / "blue circle grows" / "square turns red to blue" -> Change."""
    words = name.split()
    if len(words) == 5 and words[1] == "turns" and words[3] == "to":  # shape turns c1 to c2
        return Change(EventKind(words[2], words[0]), "recolour", words[4])
    if len(words) == 4 and words[2] == "moves" and words[3] in MOVES:
        return Change(parse_event(" ".join(words[:2])), words[3])
    if len(words) == 3 and words[2] in ("grows", "shrinks"):
        return Change(parse_event(" ".join(words[:2])), words[2][:-1])
    raise ValueError(f"not a world change: {name!r}")


def meaning_of(video: TruthVideo) -> Meaning:
    """What the query a corpus wrote for ``video`` means (its kind of video decides)."""
    names = [name for name, _, _ in sorted(video.events, key=lambda e: e[1])]
    if video.kind == "order":
        return Meaning("order", tuple(names))
    if video.kind == "count":
        return Meaning("count", (names[0],), count=len(names))
    if video.kind == "motion":
        return Meaning("change", change=video.change)
    return Meaning("event", (names[0],))
