"""The tiny-world backbone's evaluation on held-out world samples: text -> frame, text -> long video
(one-shot), and text -> clip on reversal pairs (motion and change)."""

from __future__ import annotations

import logging
from collections import Counter

import torch

from models.backbone import Backbone
from training.backbone_config import embed_clips, embed_images, embed_texts
from training.world_data import WorldSampler
from world.vocab import EVENTS, PHRASINGS, change_texts

logger = logging.getLogger(__name__)


@torch.no_grad()
def frame_check(backbone: Backbone, *, seed: int = 12345, trials: int = 3) -> dict:
    """Text -> frame retrieval over the 32 events on frames drawn with ``seed`` (held out), and the
    event-vs-empty margin: for each event text, its frames against ``4 * 32`` empty haystacks."""
    was_training = backbone.model.training
    backbone.model.eval()
    sampler = WorldSampler(backbone.frame_size, seed=seed)
    texts = [e.text(p) for p in range(len(PHRASINGS)) for e in EVENTS]
    z_txt = torch.cat([embed_texts(backbone, texts[i : i + 64]) for i in range(0, len(texts), 64)])
    correct, total, margins, colour_ok, shape_ok = 0, 0, [], 0, 0
    empties = [sampler.image(-1).clip.frames[0] for _ in range(4 * len(EVENTS))]
    z_empty = torch.cat([embed_images(backbone, empties[i : i + 64]) for i in range(0, len(empties), 64)])
    for _ in range(trials):
        frames = [sampler.image(k).clip.frames[0] for k in range(len(EVENTS))]
        z = torch.cat([embed_images(backbone, frames[i : i + 64]) for i in range(0, len(frames), 64)])
        sim = z_txt @ z.T  # [4 * 32, 32]
        truth = torch.arange(len(texts)) % len(EVENTS)
        pred = sim.argmax(dim=1)
        correct += int((pred == truth).sum())
        colour_ok += int((pred // 4 == truth // 4).sum())
        shape_ok += int((pred % 4 == truth % 4).sum())
        total += len(texts)
        pos = sim[torch.arange(len(texts)), truth]
        margins.append(pos - (z_txt @ z_empty.T).max(dim=1).values)
    margin = torch.cat(margins)
    backbone.model.train(was_training)
    return {
        "text_to_frame_top1": correct / total,
        "colour": colour_ok / total,
        "shape": shape_ok / total,
        "event_beats_all_empty": float((margin > 0).float().mean()),
        "min_margin": float(margin.min()),
    }


@torch.no_grad()
def video_check(backbone: Backbone, *, seed: int = 54321, frames: int = 64) -> dict:
    """Text -> long video (one-shot, ``frames`` frames, the event on 1-3 of them) over the 32 events,
    and colour/shape accuracy of the mistakes' nearest text."""
    was_training = backbone.model.training
    backbone.model.eval()
    sampler = WorldSampler(backbone.frame_size, seed=seed)
    texts = [e.text(0) for e in EVENTS]
    z_txt = embed_texts(backbone, texts)
    vids = [sampler.long(k, frames) for k in range(len(EVENTS))]
    z = torch.cat([embed_clips(backbone, [v.clip for v in vids[i : i + 4]]) for i in range(0, len(vids), 4)])
    labels = torch.tensor([v.label for v in vids])
    sim = z_txt @ z.T  # [32 texts, 32 videos]
    seen = labels >= 0
    hit = (sim.argmax(dim=1) == torch.arange(len(EVENTS)))[seen]
    backbone.model.train(was_training)
    return {"text_to_video_top1": float(hit.float().mean()), "videos_with_event_sampled": int(seen.sum())}


@torch.no_grad()
def motion_check(backbone: Backbone, *, seed: int = 97531, pairs: int = 56, pair_s: float = 0.0) -> dict:
    """Text -> clip on held-out reversal pairs (training.world_data ``motion_pair``, drawn with
    ``seed``): every phrasing of each clip's change against the pair's two clips (``reversal``: the
    share that ranks the right direction first, chance 0.5; per change in ``by_change``), against
    every clip drawn (``text_to_clip_top1``, chance 1 / (2 * pairs)), and against the same clip with
    the shape shown still in each colour the change shows (``above_still``: the share above every such
    still showing; per change in ``by_change_still``): whether the clip tells a change from a video
    that merely shows the shape, which is what a motion query over a whole collection asks.
    ``pair_s``: the clips' frames in temporal pairs that far apart, as serving reads a moment
    (models.windows)."""
    from world.vocab import CHANGES

    was_training = backbone.model.training
    backbone.model.eval()
    sampler = WorldSampler(backbone.frame_size, seed=seed)
    clips, changes, stills, owner = [], [], [], []
    for k in range(pairs):  # every change in turn, on random events
        change = sampler.random_change()
        while change.change != CHANGES[k % len(CHANGES)]:
            change = sampler.random_change()
        forward, backward, *still = sampler.motion_pair(change, paired=pair_s, stills=True)
        for sample in (forward, backward):
            clips.append(sample.clip)
            changes.append(sample.change)
        stills += [s.clip for s in still]
        owner += [k] * len(still)  # the pair each still showing belongs to
    z = torch.cat([embed_clips(backbone, clips[i : i + 8]) for i in range(0, len(clips), 8)])
    z_still = torch.cat([embed_clips(backbone, stills[i : i + 8]) for i in range(0, len(stills), 8)])
    owner = torch.tensor(owner)
    right, top1, total = Counter(), 0, 0
    counted, above = Counter(), Counter()
    for v, change in enumerate(changes):
        partner = v ^ 1
        z_txt = embed_texts(backbone, list(change_texts(change)))
        sim = z_txt @ z.T  # [phrasings, clips]
        right[change.change] += int((sim[:, v] > sim[:, partner]).sum())
        counted[change.change] += sim.shape[0]
        top1 += int((sim.argmax(dim=1) == v).sum())
        total += sim.shape[0]
        still_best = (z_txt @ z_still[owner == v // 2].T).max(dim=1).values  # its pair's still showings
        above[change.change] += int((sim[:, v] > still_best).sum())
    backbone.model.train(was_training)
    return {
        "reversal": sum(right.values()) / total,
        "text_to_clip_top1": top1 / total,
        "above_still": sum(above.values()) / total,
        "by_change": {c: right[c] / counted[c] for c in CHANGES if counted[c]},
        "by_change_still": {c: above[c] / counted[c] for c in CHANGES if counted[c]},
    }
