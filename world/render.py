"""A renderer for the shapes world: grey haystacks with brief, solid, coloured-shape events.

Every frame is a pure function of (spec, frame index), so a video can be rendered as a stream
(hour-long videos never sit in memory) or at random positions (training samples single frames).

Haystack (everything that is not an event is grey: a pixel's channels stay within
:data:`~world.vocab.GREY_SPREAD` of each other), built from optional layers:

    base       a grey level, plus low-frequency noise fields that drift over a few seconds
    gradient   a linear ramp whose direction turns slowly
    blobs      soft grey blobs that move and bounce
    distract   grey shapes of the four kinds (filled or outlined) that move and bounce
    blocks     blocky noise like compression artefacts, refreshed every few frames
    flicker    a global brightness jump per frame
    noise      per-pixel noise

Event: one solid shape of a vocabulary colour (nominal RGB + up to 20 per channel), sized 15-45 %
of the frame's short side, wholly inside the frame, optionally anti-aliased. At most one event is
on screen at a time. A static event drifts slowly (at most :data:`~world.vocab.STATIC_DRIFT` of the
short side over its showing); a changing event (``Event.change``, world.vocab.CHANGES) moves across
the frame in a straight line at constant speed, grows or shrinks in place, or turns from one colour
to another once, over its showing:

    right / left / down / up   the centre travels from one side to the other, at least MOVE_TRAVEL
                               of the frame's width (or height), wholly inside the frame throughout
    grow / shrink              the size changes linearly by a factor of at least GROW_FACTOR
                               (within 15-45 % of the short side), the centre fixed
    recolour                   one colour, then (at 35-65 % of the showing) ``to_colour``, in place

``Event.backwards`` plays the event's span backwards: frame i of the span shows what frame
first + last - i of the forward video shows (haystack included), so a video and its reversal hold
exactly the same frames, in the opposite order inside the span (a reversal pair; "right" played
backwards is "left", "grow" is "shrink", red -> blue is blue -> red).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
from PIL import Image

from world.vocab import (
    CHANGES,
    COLOUR_JITTER,
    COLOURS,
    EVENT_SIZE,
    GREY_SPREAD,
    GROW_FACTOR,
    MOVE_TRAVEL,
    SHAPES,
    STATIC_DRIFT,
    Change,
    EventKind,
)


@dataclass(frozen=True)
class Event:
    """One event on screen from ``start_s`` to ``end_s``."""

    kind: EventKind  # a changing event's shape, in its colour when the forward event begins
    start_s: float
    end_s: float
    size: float | None = None  # fraction of the short side (None: random within the world's range)
    change: str | None = None  # None: static; else one of world.vocab.CHANGES (module docstring)
    to_colour: str | None = None  # "recolour": the colour it turns to
    backwards: bool = False  # the span played backwards (the reversal of the forward event)

    def __post_init__(self) -> None:
        if not self.end_s > self.start_s >= 0:
            raise ValueError(f"an event needs 0 <= start < end, got {self.start_s}..{self.end_s}")
        if self.size is not None and not EVENT_SIZE[0] <= self.size <= EVENT_SIZE[1]:
            raise ValueError(f"event size must be within {EVENT_SIZE} of the short side, got {self.size}")
        if self.change is not None:
            if self.change not in CHANGES:
                raise ValueError(f"unknown change {self.change!r}; the world has {list(CHANGES)}")
            self.forward_change  # noqa: B018 (validates the colour change)

    @property
    def forward_change(self) -> Change | None:
        """The change as rendered forwards (None for a static event)."""
        return None if self.change is None else Change(self.kind, self.change, self.to_colour)

    @property
    def seen_change(self) -> Change | None:
        """The change a viewer sees: the forward one, or its reversal when played backwards."""
        change = self.forward_change
        return change.reversed() if change is not None and self.backwards else change


@dataclass(frozen=True)
class Haystack:
    """The grey background's layers (amplitudes in grey levels, 0 = layer off)."""

    base: float = 110.0
    field_amp: float = 30.0
    field_period_s: float = 4.0
    field_cells: int = 4
    gradient_amp: float = 0.0
    gradient_turn: float = 0.1  # radians per second
    blobs: int = 0
    blob_amp: float = 40.0
    distractors: int = 0
    distractor_outline: bool = False
    blocks_amp: float = 0.0
    block_px: int = 8
    flicker_amp: float = 0.0
    noise_sigma: float = 3.0
    tint: tuple[float, float, float] = (0.0, 0.0, 0.0)
    speed: float = 0.05  # motion of blobs and distractors, in frame sizes per second


@dataclass(frozen=True)
class VideoSpec:
    """Everything a world video is made of; the same spec renders the same frames."""

    width: int
    height: int
    fps: float
    duration_s: float
    events: tuple[Event, ...] = ()
    haystack: Haystack = field(default_factory=Haystack)
    seed: int = 0
    antialias: bool = True

    def __post_init__(self) -> None:
        if self.width < 16 or self.height < 16:
            raise ValueError(f"frames must be at least 16x16, got {self.width}x{self.height}")
        if self.fps <= 0 or self.duration_s <= 0:
            raise ValueError("fps and duration must be positive")
        ordered = sorted(self.events, key=lambda e: e.start_s)
        for a, b in zip(ordered, ordered[1:], strict=False):
            if b.start_s < a.end_s:
                raise ValueError("events overlap: at most one event is on screen at a time")

    @property
    def num_frames(self) -> int:
        return max(1, int(round(self.duration_s * self.fps)))

    def frame_time(self, index: int) -> float:
        return index / self.fps

    def event_frames(self, event: Event) -> range:
        """Indices of the frames on which ``event`` is drawn."""
        first = int(math.ceil(event.start_s * self.fps - 1e-9))
        last = min(self.num_frames - 1, int(math.floor(event.end_s * self.fps - 1e-9)))
        return range(first, last + 1)

    def source_index(self, index: int) -> int:
        """The forward frame that frame ``index`` shows: itself, or its mirror inside the span of an
        event played backwards."""
        for event in self.events:
            if event.backwards:
                span = self.event_frames(event)
                if index in span:
                    return span.start + span.stop - 1 - index
        return index


# -- randomness ---------------------------------------------------------------------------------


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng([int(k) & 0xFFFFFFFF for k in keys])


def random_haystack(rng: np.random.Generator, difficulty: float = 1.0) -> Haystack:
    """A haystack with a random mix of layers. At ``difficulty`` 1 each kind the world allows
    appears often; lower values make busy layers rarer and fainter (a training curriculum)."""
    d = float(np.clip(difficulty, 0.0, 1.0))
    base = float(rng.uniform(45, 200))
    room = min(base, 255 - base)
    return Haystack(
        base=base,
        field_amp=float(rng.uniform(0, min(50, room)) * (0.3 + 0.7 * d)) if rng.random() < 0.8 else 0.0,
        field_period_s=float(rng.uniform(1.5, 8)),
        field_cells=int(rng.integers(2, 9)),
        gradient_amp=float(rng.uniform(10, min(70, 2 * room + 10))) if rng.random() < 0.4 * d else 0.0,
        gradient_turn=float(rng.uniform(-0.4, 0.4)),
        blobs=int(rng.integers(1, 6)) if rng.random() < 0.4 * d else 0,
        blob_amp=float(rng.uniform(15, 70)),
        distractors=int(rng.integers(1, 4)) if rng.random() < 0.45 * d else 0,
        distractor_outline=bool(rng.random() < 0.3),
        blocks_amp=float(rng.uniform(4, 25)) if rng.random() < 0.3 * d else 0.0,
        block_px=int(rng.choice([4, 8, 16])),
        flicker_amp=float(rng.uniform(3, 25)) if rng.random() < 0.3 * d else 0.0,
        noise_sigma=float(rng.uniform(0, 8 * d)),
        tint=tuple(float(x) for x in rng.uniform(-3, 3, size=3)),
        speed=float(rng.uniform(0, 0.15)),
    )


# -- geometry -----------------------------------------------------------------------------------


def shape_coverage(shape: str, size: float, width: int, height: int, cx: float, cy: float, aa: int = 3):
    """Coverage in [0, 1] of a shape of ``size`` px (side, diameter, or bar width = 3 x height)
    centred at (cx, cy) -> (y0, x0, [h, w] float32) on its bounding box only; ``aa`` samples per
    pixel side (1 = hard edges)."""
    half = size / 2
    y0, y1 = max(0, int(cy - half) - 1), min(height, int(math.ceil(cy + half)) + 1)
    x0, x1 = max(0, int(cx - half) - 1), min(width, int(math.ceil(cx + half)) + 1)
    offs = (np.arange(aa, dtype=np.float32) + 0.5) / aa
    ys = (np.arange(y0, y1, dtype=np.float32)[:, None] + offs[None, :]).reshape(-1)
    xs = (np.arange(x0, x1, dtype=np.float32)[:, None] + offs[None, :]).reshape(-1)
    dy, dx = ys[:, None] - cy, xs[None, :] - cx
    if shape == "square":
        inside = (np.abs(dx) <= half) & (np.abs(dy) <= half)
    elif shape == "circle":
        inside = dx * dx + dy * dy <= half * half
    elif shape == "bar":
        inside = (np.abs(dx) <= half) & (np.abs(dy) <= size / 6)
    elif shape == "triangle":  # apex up, base = size, height = size * sqrt(3) / 2, centred on its box
        tri_h = size * math.sqrt(3) / 2
        top = -tri_h / 2
        frac = (dy - top) / tri_h  # 0 at the apex, 1 at the base
        inside = (frac >= 0) & (frac <= 1) & (np.abs(dx) <= frac * half)
    else:
        raise ValueError(f"unknown shape {shape!r}; the world has {list(SHAPES)}")
    cov = inside.reshape(y1 - y0, aa, x1 - x0, aa).mean(axis=(1, 3), dtype=np.float32)
    return y0, x0, cov


def _outline(cov: np.ndarray, px: int) -> np.ndarray:
    """The rim of a coverage mask, ``px`` pixels wide."""
    inner = cov.copy()
    for _ in range(px):
        inner[1:-1, 1:-1] = np.minimum.reduce(
            [inner[1:-1, 1:-1], inner[:-2, 1:-1], inner[2:, 1:-1], inner[1:-1, :-2], inner[1:-1, 2:]]
        )
        inner[[0, -1], :] = 0
        inner[:, [0, -1]] = 0
    return np.clip(cov - inner, 0, 1)


@dataclass(frozen=True)
class _Placement:
    size: float
    x: float
    y: float
    vx: float
    vy: float
    rgb: tuple[float, float, float]
    # a changing event: the size at its end (grow, shrink), the colour after the switch and when
    # it happens (a share of the showing), and how long the showing lasts
    end_size: float | None = None
    end_rgb: tuple[float, float, float] | None = None
    switch: float = 0.5
    duration: float = 1.0

    def centre(self, t: float, width: int, height: int) -> tuple[float, float]:
        """Centre at time ``t`` (seconds since the event began), bouncing inside the frame (a moving
        event's path lies inside it, so it never bounces)."""
        r = max(self.size, self.end_size or 0.0) / 2 + 1
        return _bounce(self.x + self.vx * t, r, width - r), _bounce(self.y + self.vy * t, r, height - r)

    def size_at(self, t: float) -> float:
        if self.end_size is None:
            return self.size
        u = min(1.0, max(0.0, t / self.duration))
        return self.size + (self.end_size - self.size) * u

    def rgb_at(self, t: float) -> tuple[float, float, float]:
        if self.end_rgb is None or t < self.switch * self.duration:
            return self.rgb
        return self.end_rgb


def _near(rgb, nominal) -> bool:
    return all(abs(a - b) <= COLOUR_JITTER + 1e-6 for a, b in zip(rgb, nominal, strict=True))


def _bounce(v: float, lo: float, hi: float) -> float:
    if hi <= lo:
        return (lo + hi) / 2
    span = hi - lo
    p = (v - lo) % (2 * span)
    return lo + (p if p <= span else 2 * span - p)


def _colour(rng: np.random.Generator, colour: str) -> tuple[float, float, float]:
    nominal = np.asarray(COLOURS[colour], dtype=np.float64)
    return tuple(np.clip(nominal + rng.uniform(-COLOUR_JITTER, COLOUR_JITTER, size=3), 0, 255).tolist())


def _placement(
    rng: np.random.Generator,
    kind: EventKind | None,
    width: int,
    height: int,
    *,
    size=None,
    duration: float | None = None,
):
    """A static event's (or a distractor's, ``kind`` None) size, position, drift and colour. The
    drift is slow: at most 4 % of the short side per second, and at most STATIC_DRIFT of it over a
    showing of ``duration`` seconds."""
    short = min(width, height)
    size = float(size if size is not None else rng.uniform(*EVENT_SIZE) * short)
    r = size / 2 + 1
    x = float(rng.uniform(r, max(r, width - r)))
    y = float(rng.uniform(r, max(r, height - r)))
    speed = float(rng.uniform(0, 0.04)) * short
    if duration is not None:
        speed = min(speed, STATIC_DRIFT * short / duration)
    angle = float(rng.uniform(0, 2 * math.pi))
    rgb = _colour(rng, kind.colour) if kind is not None else (0.0, 0.0, 0.0)
    return _Placement(size, x, y, speed * math.cos(angle), speed * math.sin(angle), rgb)


def _change_placement(rng: np.random.Generator, event: Event, width: int, height: int) -> _Placement:
    """A changing event's path, sizes and colours (the module docstring), drawn forwards."""
    short, duration = min(width, height), event.end_s - event.start_s
    lo, hi = EVENT_SIZE[0] * short, EVENT_SIZE[1] * short
    rgb = _colour(rng, event.kind.colour)
    if event.change in ("grow", "shrink"):
        small = float(event.size * short if event.size else rng.uniform(lo, hi / GROW_FACTOR))
        small = min(small, hi / GROW_FACTOR)
        big = float(rng.uniform(GROW_FACTOR * small, hi))
        r = big / 2 + 1
        x, y = float(rng.uniform(r, max(r, width - r))), float(rng.uniform(r, max(r, height - r)))
        start, end = (small, big) if event.change == "grow" else (big, small)
        return _Placement(start, x, y, 0.0, 0.0, rgb, end_size=end, duration=duration)
    size = float(event.size * short if event.size else rng.uniform(lo, hi))
    r = size / 2 + 1
    if event.change == "recolour":
        x, y = float(rng.uniform(r, max(r, width - r))), float(rng.uniform(r, max(r, height - r)))
        end_rgb = _colour(rng, event.to_colour)
        switch = float(rng.uniform(0.35, 0.65))
        return _Placement(size, x, y, 0.0, 0.0, rgb, end_rgb=end_rgb, switch=switch, duration=duration)
    # right, left, down, up: a straight line across at least MOVE_TRAVEL of the frame, inside it
    along, across = (width, height) if event.change in ("right", "left") else (height, width)
    room = max(0.0, along - 2 * r)
    size_fits = room >= MOVE_TRAVEL * along
    if not size_fits:  # shrink the shape until the path fits (a narrow frame, a big shape)
        size = max(lo, along * (1 - MOVE_TRAVEL) - 2.5)
        r = size / 2 + 1
        room = max(0.0, along - 2 * r)
    travel = float(rng.uniform(min(room, MOVE_TRAVEL * along), room))
    begin = float(rng.uniform(r, r + room - travel))
    side = float(rng.uniform(r, max(r, across - r)))
    sign = 1.0 if event.change in ("right", "down") else -1.0
    if sign < 0:
        begin += travel
    speed = sign * travel / duration
    if event.change in ("right", "left"):
        return _Placement(size, begin, side, speed, 0.0, rgb, duration=duration)
    return _Placement(size, side, begin, 0.0, speed, rgb, duration=duration)


# -- rendering ----------------------------------------------------------------------------------


class Renderer:
    """Frames of one :class:`VideoSpec` (random access, or streamed by :meth:`frames`)."""

    def __init__(self, spec: VideoSpec):
        self.spec = spec
        w, h, hs = spec.width, spec.height, spec.haystack
        rng = _rng(spec.seed, 1)
        self._blobs = [
            (rng.uniform(0, w), rng.uniform(0, h), rng.uniform(-1, 1, 2), rng.uniform(0.05, 0.25) * min(w, h),
             rng.choice([-1.0, 1.0]) * hs.blob_amp * rng.uniform(0.5, 1.0))
            for _ in range(hs.blobs)
        ]  # fmt: skip
        self._distractors = []
        for _ in range(hs.distractors):
            p = _placement(rng, None, w, h, size=rng.uniform(0.1, 0.45) * min(w, h))
            level = float(np.clip(hs.base + rng.choice([-1, 1]) * rng.uniform(25, 80), 10, 200))
            self._distractors.append((str(rng.choice(SHAPES)), p, level, rng.uniform(-1, 1, 2)))
        self._grad_angle = float(rng.uniform(0, 2 * math.pi))
        self._events = []
        for k, event in enumerate(spec.events):
            erng = _rng(spec.seed, 2, k)
            if event.change is not None:
                self._events.append((event, _change_placement(erng, event, w, h)))
                continue
            size = None if event.size is None else event.size * min(w, h)
            duration = event.end_s - event.start_s
            self._events.append((event, _placement(erng, event.kind, w, h, size=size, duration=duration)))
        self._fields: dict[int, np.ndarray] = {}
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        self._yy, self._xx = (yy - h / 2) / max(w, h), (xx - w / 2) / max(w, h)

    # grey layers ---------------------------------------------------------------------------------
    def _field(self, key: int) -> np.ndarray:
        if key not in self._fields:
            if len(self._fields) > 2:
                self._fields.pop(min(self._fields))
            self._fields[key] = self._make_field(key)
        return self._fields[key]

    def _make_field(self, key: int) -> np.ndarray:
        hs, spec = self.spec.haystack, self.spec
        cells = max(2, hs.field_cells)
        aspect = spec.width / spec.height
        gw, gh = (
            (max(2, round(cells * aspect)), cells) if aspect >= 1 else (cells, max(2, round(cells / aspect)))
        )
        small = _rng(spec.seed, 3, key).uniform(-1, 1, size=(gh, gw)).astype(np.float32)
        return np.asarray(Image.fromarray(small, mode="F").resize((spec.width, spec.height), Image.BILINEAR))

    def grey(self, index: int) -> np.ndarray:
        """The haystack's grey level at frame ``index`` -> [H, W] float32."""
        spec, hs = self.spec, self.spec.haystack
        t = spec.frame_time(index)
        w, h = spec.width, spec.height
        img = np.full((h, w), hs.base, dtype=np.float32)
        if hs.field_amp:
            u = t / hs.field_period_s
            k = int(math.floor(u))
            a = (1 - math.cos(math.pi * (u - k))) / 2
            img += hs.field_amp * ((1 - a) * self._field(k) + a * self._field(k + 1))
        if hs.gradient_amp:
            ang = self._grad_angle + hs.gradient_turn * t
            img += hs.gradient_amp * (self._xx * math.cos(ang) + self._yy * math.sin(ang))
        for x, y, v, radius, amp in self._blobs:
            cx = _bounce(x + v[0] * hs.speed * w * t, 0, w)
            cy = _bounce(y + v[1] * hs.speed * h * t, 0, h)
            d2 = (
                (self._xx * max(w, h) + w / 2 - cx) ** 2 + (self._yy * max(w, h) + h / 2 - cy) ** 2
            ) / radius**2
            img += amp * np.exp(-d2)
        for shape, p, level, v in self._distractors:
            moved = replace(p, vx=v[0] * hs.speed * w, vy=v[1] * hs.speed * h)
            cx, cy = moved.centre(t, w, h)
            y0, x0, cov = shape_coverage(shape, p.size, w, h, cx, cy, aa=2 if spec.antialias else 1)
            if hs.distractor_outline:
                cov = _outline(cov, max(1, int(p.size / 12)))
            region = img[y0 : y0 + cov.shape[0], x0 : x0 + cov.shape[1]]
            region += cov * (level - region)
        if hs.blocks_amp:
            bp = max(2, hs.block_px)
            gh, gw = -(-h // bp), -(-w // bp)
            blocks = _rng(spec.seed, 4, index // 3).normal(0, hs.blocks_amp, size=(gh, gw)).astype(np.float32)
            img += np.kron(blocks, np.ones((bp, bp), dtype=np.float32))[:h, :w]
        if hs.flicker_amp:
            img += float(_rng(spec.seed, 5, index).uniform(-hs.flicker_amp, hs.flicker_amp))
        if hs.noise_sigma:
            img += _rng(spec.seed, 6, index).normal(0, hs.noise_sigma, size=(h, w)).astype(np.float32)
        return img

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` -> [H, W, 3] uint8 (inside the span of an event played backwards: the
        forward frame it mirrors, :meth:`VideoSpec.source_index`)."""
        spec = self.spec
        index = spec.source_index(index)
        grey = self.grey(index)
        tint = np.clip(np.asarray(spec.haystack.tint, dtype=np.float32), -GREY_SPREAD / 4, GREY_SPREAD / 4)
        chan = _rng(spec.seed, 7, index).uniform(-1, 1, size=(1, 1, 3)).astype(np.float32)
        img = grey[:, :, None] + tint + chan
        for kind, (cx, cy, size), rgb in self._drawn(index):
            y0, x0, cov = shape_coverage(
                kind.shape, size, spec.width, spec.height, cx, cy, aa=3 if spec.antialias else 1
            )
            region = img[y0 : y0 + cov.shape[0], x0 : x0 + cov.shape[1]]
            region += cov[:, :, None] * (np.asarray(rgb, dtype=np.float32) - region)
        return np.clip(img + 0.5, 0, 255).astype(np.uint8)

    def _drawn(self, index: int):
        """(kind, (cx, cy, size), rgb) of every event drawn on forward frame ``index``."""
        spec = self.spec
        t = spec.frame_time(index)
        out = []
        for event, p in self._events:
            if index in spec.event_frames(event):
                since = t - event.start_s
                cx, cy = p.centre(since, spec.width, spec.height)
                out.append((event.kind, (cx, cy, p.size_at(since)), p.rgb_at(since)))
        return out

    def frames(self, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        stop = self.spec.num_frames if stop is None else min(stop, self.spec.num_frames)
        for i in range(start, stop):
            yield self.frame(i)

    def event_boxes(self, index: int) -> list[tuple[EventKind, tuple[float, float, float]]]:
        """(kind, (cx, cy, size)) of the events drawn on frame ``index`` (ground truth for checks; a
        colour change's kind is the colour it shows on that frame)."""
        out = []
        for kind, box, rgb in self._drawn(self.spec.source_index(index)):
            shown = next((c for c, nominal in COLOURS.items() if _near(rgb, nominal)), kind.colour)
            out.append((EventKind(shown, kind.shape), box))
        return out

    def event_mask(self, index: int) -> np.ndarray:
        """Coverage [H, W] float32 in 0..1 of the event drawn on frame ``index`` (zeros if none)."""
        spec = self.spec
        mask = np.zeros((spec.height, spec.width), dtype=np.float32)
        for kind, (cx, cy, size) in self.event_boxes(index):
            aa = 3 if spec.antialias else 1  # exactly the coverage that was drawn
            y0, x0, cov = shape_coverage(kind.shape, size, spec.width, spec.height, cx, cy, aa=aa)
            mask[y0 : y0 + cov.shape[0], x0 : x0 + cov.shape[1]] = cov
        return mask
