"""Training and evaluation samples for the tiny-world backbone, drawn from the shapes world.

Every sample is what the production path would hand the backbone: frames at a working size
chosen by :func:`models.backbone.working_size` from a random source size and aspect ratio, either
rendered at that size or rendered at the source size, pushed through a lossy 4:2:0 codec (JPEG)
and resized the way a decoder would; video samples carry real frame indices and fps, so the
prompt's timestamps are real.

Kinds of sample (``label`` is an event index 0..31, or -1 for an empty haystack):
- images: single frames (the frame bank embeds frames as images);
- clips: 2-16 frames of one video, with the event on a run of frames somewhere, or none;
- long: 24-64 frames spread over a long video, the event on 1-3 of them (one-shot indexing);
- order: two events in order, and the mirror clip with the same events reversed;
- motion: a changing event (world.vocab.CHANGES: moves across, grows or shrinks, turns colour) in a
  clip of 4-8 frames spaced as a frame bank spaces them around a moment (0.4-1.25 s apart), and
  the same clip with the event played backwards (a reversal pair: the same frames' content, the
  opposite change).
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

from models.backbone import VideoClip, working_size
from world.render import Event, Renderer, VideoSpec, random_haystack
from world.vocab import CHANGE_S, CHANGES, COLOURS, EVENT_SIZE, EVENTS, Change, EventKind

ASPECTS = ((1, 1), (4, 3), (3, 4), (16, 9), (9, 16), (3, 2), (2, 3), (2, 1), (1, 2), (5, 4))


@dataclass
class Sample:
    clip: VideoClip  # frames [L, h, w, 3] uint8 + frame indices + fps
    label: int  # event index, or -1 (empty)
    order: tuple[int, int] | None = None  # (first, second) for order samples
    masks: np.ndarray | None = None  # [L, h, w] float32 event coverage at the working size
    change: Change | None = None  # motion samples: the change a viewer sees

    @property
    def shows(self) -> set[int]:
        """The event indices whose colour and shape are on screen in this sample."""
        if self.change is not None:
            return shown_events(self.change)
        if self.order:
            return set(self.order)
        return {self.label} if self.label >= 0 else set()


def shown_events(change: Change) -> set[int]:
    """The event indices a changing event shows: its event, and the colour it turns to."""
    kinds = {change.kind}
    if change.to_colour is not None:
        kinds.add(EventKind(change.to_colour, change.kind.shape))
    return {k.index for k in kinds}


class WorldSampler:
    """Random world samples at a backbone's working resolution (``frame_size`` pixel budget)."""

    def __init__(self, frame_size: int, seed: int, *, codec_p: float = 0.5, difficulty: float = 1.0):
        self.frame_size = frame_size
        self.rng = np.random.default_rng(seed)
        self.codec_p = codec_p
        self.difficulty = difficulty  # 0: clean haystacks and big events ... 1: the whole world

    def _size(self) -> float:
        """Event size (fraction of the short side): 0.30-0.45 at difficulty 0, 0.15-0.45 at 1."""
        lo = 0.30 - (0.30 - EVENT_SIZE[0]) * self.difficulty
        return float(self.rng.uniform(lo, EVENT_SIZE[1]))

    # -- geometry ------------------------------------------------------------------------------
    def _source_size(self) -> tuple[int, int]:
        aw, ah = ASPECTS[self.rng.integers(len(ASPECTS))]
        short = int(self.rng.integers(64, 481))
        w, h = (short * aw // ah, short) if aw >= ah else (short, short * ah // aw)
        return max(16, min(w, 960)), max(16, min(h, 960))

    def _path(self) -> tuple[bool, int, int]:
        """How a sample reaches the working size: through a lossy codec or not, its quality, the resize."""
        via_codec = self.rng.random() < self.codec_p * self.difficulty
        quality = int(self.rng.integers(35, 95))
        return via_codec, quality, [Image.BILINEAR, Image.BICUBIC, Image.BOX][self.rng.integers(3)]

    def _render_path(
        self, spec: VideoSpec, indices, work: tuple[int, int], *, path: tuple | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Frames ``indices`` of ``spec`` at the working size ``work`` = (w, h) -> [n, h, w, 3], and
        the event's coverage at that size [n, h, w]. ``path``: :meth:`_path`'s draw (a reversal pair's
        two clips pass the same one)."""
        renderer = Renderer(spec)
        out, masks = [], []
        via_codec, quality, resample = path or self._path()
        for i in indices:
            frame = renderer.frame(int(i))
            img = Image.fromarray(frame)
            if via_codec:
                buf = io.BytesIO()
                img.save(buf, format="JPEG", quality=quality, subsampling=2)
                img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
            if img.size != work:
                img = img.resize(work, resample)
            out.append(np.asarray(img, dtype=np.uint8))
            mask = Image.fromarray(renderer.event_mask(int(i)), mode="F")
            masks.append(np.asarray(mask.resize(work, Image.BOX) if mask.size != work else mask))
        return np.stack(out), np.stack(masks)

    def _spec(
        self, duration_s: float, fps: float, events: tuple[Event, ...]
    ) -> tuple[VideoSpec, tuple[int, int]]:
        src_w, src_h = self._source_size()
        work = working_size(src_w, src_h, self.frame_size)
        # Half the samples are drawn at the working size (crisp), half at the source size and resized.
        if self.rng.random() < 1 - 0.5 * self.difficulty:
            src_w, src_h = work
        else:  # bound the cost of big sources: at most twice the working size
            scale = min(1.0, 2 * max(work) / max(src_w, src_h))
            src_w, src_h = max(16, int(src_w * scale)), max(16, int(src_h * scale))
        spec = VideoSpec(
            src_w,
            src_h,
            fps,
            duration_s,
            events,
            random_haystack(self.rng, self.difficulty),
            seed=int(self.rng.integers(2**31)),
            antialias=bool(self.rng.random() < 0.7),
        )
        return spec, work

    def _kind(self) -> EventKind:
        return EVENTS[self.rng.integers(len(EVENTS))]

    # -- samples -------------------------------------------------------------------------------
    def image(self, label: int) -> Sample:
        events = (Event(EVENTS[label], 0.0, 10.0, self._size()),) if label >= 0 else ()
        spec, work = self._spec(10.0, 10.0, events)
        i = int(self.rng.integers(spec.num_frames))
        frames, masks = self._render_path(spec, [i], work)
        return Sample(VideoClip(frames, [i], spec.fps), label, masks=masks)

    def _sequence(self, n: int, label: int, max_run: int, spread_s: float) -> Sample:
        """``n`` frames spread over ``spread_s`` seconds with the event on a run of 1..max_run of them."""
        fps = float(self.rng.choice([4.0, 6.0, 8.0, 10.0, 12.0, 24.0, 25.0, 30.0]))
        step = max(1, int(round(spread_s * fps / n)))
        offset = int(self.rng.integers(0, step))
        indices = offset + step * np.arange(n)
        duration = (indices[-1] + 1) / fps + 1.0
        events: tuple[Event, ...] = ()
        if label >= 0:
            run = int(self.rng.integers(1, max_run + 1))
            first = int(self.rng.integers(0, n - run + 1))
            t0, t1 = indices[first] / fps, indices[first + run - 1] / fps
            # cover exactly the run's frames (the event lasts at least a second)
            start = max(0.0, t0 - float(self.rng.uniform(0, 0.4)) / fps)
            end = max(t1 + 0.6 / fps, start + 1.0)
            if first + run < n:
                end = min(end, indices[first + run] / fps - 0.1 / fps)
            if first > 0:
                start = max(start, indices[first - 1] / fps + 0.1 / fps)
            if end - start < 1.0:  # sparse sampling: a 1 s event between two sampled frames
                end = start + 1.0
            events = (Event(EVENTS[label], start, end, self._size()),)
        spec, work = self._spec(duration, fps, events)
        frames, masks = self._render_path(spec, indices, work)
        if label >= 0 and not any(spec.event_frames(events[0]).count(int(i)) for i in indices):
            label = -1  # the event fell between sampled frames: this is an empty sample
        return Sample(VideoClip(frames, indices.tolist(), fps), label, masks=masks)

    def clip(self, label: int) -> Sample:
        n = int(self.rng.choice([2, 4, 4, 8, 8, 16]))
        return self._sequence(
            n, label, max_run=max(1, n // 2), spread_s=float(self.rng.uniform(n * 0.25, n * 4))
        )

    def long(self, label: int, frames: int) -> Sample:
        return self._sequence(frames, label, max_run=3, spread_s=float(self.rng.uniform(60, 300)))

    def order_pair(self) -> tuple[Sample, Sample]:
        """The same two events as A-then-B and B-then-A clips (a mirror pair)."""
        while True:
            a, b = self.rng.choice(len(EVENTS), size=2, replace=False)
            if EVENTS[a].colour != EVENTS[b].colour or EVENTS[a].shape != EVENTS[b].shape:
                break
        n = int(self.rng.choice([4, 8, 16]))
        fps = 4.0
        step = int(self.rng.integers(1, 9))
        indices = step * np.arange(n)
        out = []
        run = max(1, n // 4)
        p1 = int(self.rng.integers(0, n // 2 - run + 1))
        p2 = int(self.rng.integers(n // 2, n - run + 1))
        for first, second in ((a, b), (b, a)):
            t = indices / fps
            e1_end = max(t[p1 + run - 1] + 0.01, t[p1] + 1.0)
            e1 = Event(EVENTS[first], max(0.0, t[p1] - 0.01), e1_end, self._size())
            s2 = max(t[p2] - 0.01, e1.end_s + 0.01)
            e2 = Event(EVENTS[second], s2, max(t[p2 + run - 1] + 0.01, s2 + 1.0), self._size())
            spec, work = self._spec((indices[-1] + 1) / fps + 3.0, fps, (e1, e2))
            frames, masks = self._render_path(spec, indices, work)
            out.append(
                Sample(
                    VideoClip(frames, indices.tolist(), fps), -1, order=(int(first), int(second)), masks=masks
                )
            )
        return out[0], out[1]

    def random_change(self) -> Change:
        kind = self._kind()
        change = str(self.rng.choice(CHANGES))
        to = str(self.rng.choice([c for c in COLOURS if c != kind.colour])) if change == "recolour" else None
        return Change(kind, change, to)

    def motion_pair(
        self,
        change: Change | None = None,
        frames: int | None = None,
        paired: float = 0.0,
        *,
        stills: bool = False,
    ) -> tuple[Sample, ...]:
        """A changing event forwards and the same event backwards (a reversal pair), each as a clip of
        ``frames`` (4-8) frames spaced as a frame bank spaces them around a moment: 0.4-1.25 s apart,
        at least two of them inside the event, which lasts 3-6 s; the same frame indices in both.

        ``stills``: then, for each colour the change shows (its shape's, and for a colour change the one
        it turns to), the same clip with that shape shown still over the event's span (a static event:
        what a video that merely shows the shape holds), on the same haystack and frames; drawn from the
        same random state as the pair, so the pair is the same with or without them."""
        change = change or self.random_change()
        n = int(frames or self.rng.choice([4, 6, 6, 8, 8]))
        fps = float(self.rng.choice([4.0, 6.0, 8.0, 10.0, 12.0, 24.0, 25.0, 30.0]))
        length = float(self.rng.uniform(*CHANGE_S))
        dt = float(self.rng.uniform(0.4, 1.25))
        span = (n - 1) * dt
        start = 1.0 + float(self.rng.uniform(0, 2.0))
        # the clip's frames: the event somewhere in the clip, at least two frames inside it
        inside = min(length, span)
        first_t = (
            start - float(self.rng.uniform(0, max(0.0, span - inside))) + float(self.rng.uniform(0, 0.1))
        )
        first_t = max(0.0, min(first_t, start + length - dt - 0.05))
        times = first_t + dt * np.arange(n)
        if paired:  # each temporal patch a bank frame and the source frame a moment after it
            times = first_t + dt * (np.arange(n) // 2) + (np.arange(n) % 2) * paired
        indices = np.unique(np.round(times * fps).astype(int))
        duration = (indices[-1] + 1) / fps + 1.0
        out = []
        spec = None
        size = self._size()
        for backwards in (False, True):
            event = Event(change.kind, start, start + length, size, change=change.change,
                          to_colour=change.to_colour, backwards=backwards)  # fmt: skip
            if spec is None:
                spec, work = self._spec(duration, fps, (event,))
                path = self._path()
            else:
                spec = VideoSpec(spec.width, spec.height, fps, duration, (event,), spec.haystack,
                                 seed=spec.seed, antialias=spec.antialias)  # fmt: skip
            frames_, masks = self._render_path(spec, indices, work, path=path)
            out.append(
                Sample(VideoClip(frames_, indices.tolist(), fps), -1, masks=masks, change=event.seen_change)
            )
        colours = [c for c in (change.kind.colour, change.to_colour) if c] if stills else []
        for kind in (EventKind(c, change.kind.shape) for c in colours):
            still = dataclasses.replace(spec, events=(Event(kind, start, start + length, size),))
            frames_, masks = self._render_path(still, indices, work, path=path)
            out.append(Sample(VideoClip(frames_, indices.tolist(), fps), kind.index, masks=masks))
        return tuple(out)


def token_coverage(mask: np.ndarray, token_px: int) -> np.ndarray:
    """[h, w] coverage -> [h / token_px * w / token_px] mean coverage of each vision token, in the
    processor's (row-major) order of merged tokens."""
    h, w = mask.shape
    return mask.reshape(h // token_px, token_px, w // token_px, token_px).mean(axis=(1, 3)).reshape(-1)


def event_labels(label: int) -> tuple[int, int]:
    """(colour index 0..7 or 8 for none, shape index 0..3 or 4 for none) of an event label."""
    if label < 0:
        return 8, 4
    return label // 4, label % 4
