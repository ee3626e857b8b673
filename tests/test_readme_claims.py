"""The README's commands and claims against the code they describe (issue 40): a command that
cannot run as written, or a count or cost the code does not have, fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_indexer_build_names_its_model():
    builds = re.findall(r"`?indexer build [^`\n]*", README)
    assert builds and all("--model" in b for b in builds), builds


def test_the_demo_counts_match_the_demo():
    from qaslr.commands.demo import SAMPLE_CORPUS, SUGGESTIONS

    printed = SUGGESTIONS + 3  # then one about order, one about count and one about motion
    words = {3: "three", 5: "five", 6: "six"}
    assert f"the demo prints {words[printed]} such queries" in README
    pairs = SAMPLE_CORPUS["order_pairs"] + SAMPLE_CORPUS["count_pairs"] + SAMPLE_CORPUS["motion_pairs"]
    videos = 8 + 2 * pairs  # --videos default 8
    assert f"renders {videos} sample videos" in README


def test_a_running_server_is_told_to_reload_after_indexer_add():
    own = README[README.index("**Your own videos**") :]
    assert "POST /admin/reload-index" in own[:1200] and "SIGHUP" in own[:1200]


def test_the_first_screen_comes_before_the_results():
    assert README.index("## Searching") < README.index("<!-- results:start")
    first_use = README.index("frame tier")
    assert README.index("*frame tier*") == first_use - 1  # defined (in italics) where first used


def test_no_cost_claim_the_measurements_do_not_make():
    for path in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        text = path.read_text(encoding="utf-8")
        assert "several thousand times" not in text, path.name
