"""What the service must say about the backbone it serves, wherever it answers: random weights
(rankings are meaningless) and the shapes-world backbone (``tiny-world``, trained only on the
generated shapes world: its rankings of any other video mean nothing).

The shapes-world marker is the checkpoint's own record, ``qaslr_backbone.json`` with
``"preset": "tiny-world"`` (written by ``training.backbone.tiny_world_checkpoint`` for every seed),
not the directory's name, which a user may change.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

SHAPES_WORLD_PRESET = "tiny-world"  # training.backbone.PRESET (kept equal by a test)
RANDOM_WEIGHTS_WARNING = "the backbone has random weights: rankings are meaningless"
SHAPES_WORLD_WARNING = (
    "shapes-world backbone (tiny-world): it was trained only on generated shapes-world videos, so "
    "rankings of any other video mean nothing; serve real weights (--model) for real video"
)


@functools.lru_cache(maxsize=16)
def _preset_of(directory: str) -> str | None:
    hints = Path(directory) / "qaslr_backbone.json"
    try:
        return json.loads(hints.read_text(encoding="utf-8")).get("preset")
    except (OSError, ValueError, AttributeError):
        return None


def is_shapes_world(engine) -> bool:
    """Whether ``engine`` serves the shapes-world backbone (its checkpoint says preset tiny-world)."""
    model = getattr(getattr(engine, "config", None), "model", None)  # the engine's EngineConfig
    if not model or not Path(str(model)).is_dir():  # a hub id is never the shapes-world backbone
        return False
    return _preset_of(str(Path(str(model)).resolve())) == SHAPES_WORLD_PRESET


def backbone_warnings(engine) -> list[str]:
    """The warnings every answer served by ``engine`` carries (empty for a real trained backbone)."""
    warnings = []
    if getattr(engine, "random_weights", False):
        warnings.append(RANDOM_WEIGHTS_WARNING)
    if is_shapes_world(engine):
        warnings.append(SHAPES_WORLD_WARNING)
    return warnings


def answer_warnings(engine) -> list[str]:
    """The warnings each search answer served by ``engine`` carries: the shapes-world one (random
    weights are said by /readyz, the page and the log)."""
    return [SHAPES_WORLD_WARNING] if is_shapes_world(engine) else []
