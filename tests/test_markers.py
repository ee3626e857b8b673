"""Tests are marked by what they need (pyproject.toml registers the markers, tests/conftest.py marks
by fixture, the README says how to select them), so a contributor without Redis or Chromium runs
what can run."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDS = ("redis", "browser", "ray", "root", "gpu")


def _registered() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}


def test_the_markers_by_need_are_registered_beside_slow():
    assert {"slow", *NEEDS} <= _registered()


def test_the_readme_says_how_to_select_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in NEEDS:
        assert re.search(rf"`{name}`", readme), name
    assert "not slow and not redis and not browser" in readme


def test_fixtures_that_need_something_mark_their_tests():
    """Every fixture the conftest maps to a need names registered markers only."""
    from tests.conftest import NEEDS_BY_FIXTURE

    assert {m for marks in NEEDS_BY_FIXTURE.values() for m in marks} <= set(NEEDS)
    assert {"own_redis", "shared_redis_prefix", "driver", "ray_bin"} <= set(NEEDS_BY_FIXTURE)
