"""``.env.example`` and the settings table of ``docs/architecture.md``, generated from the settings'
one declaration (:data:`engine.config.SETTINGS` and :data:`service.settings.HTTP_SETTINGS`).

    python -m service.settings_doc --write     # rewrite both after changing a declaration
    python -m service.settings_doc --check     # exit 1 when either is out of step (the tests check too)
"""

from __future__ import annotations

import argparse
import enum
import sys
import textwrap
from pathlib import Path

from engine.config import Setting
from service.settings import ALL_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
ENV_EXAMPLE = ROOT / ".env.example"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TABLE_START = "<!-- settings:start (python -m service.settings_doc --write) -->"
TABLE_END = "<!-- settings:end -->"
WIDTH = 110

ENV_HEADER = """\
# Settings of the search engine and its HTTP service (`qaslr serve`), one variable each. Generated from
# their one declaration (engine/config.py SETTINGS, service/settings.py HTTP_SETTINGS) by
# `python -m service.settings_doc --write`: change the declaration, not this file. Copy to .env for
# docker compose, or export them. Layers: what the index records < these defaults < the environment <
# `qaslr serve` flags.
"""


def value(s: Setting, v) -> str:
    """A setting's value as the environment spells it (empty: unset)."""
    if v is None or v == []:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, enum.Enum):
        return str(v.value)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def env_example() -> str:
    """The text of ``.env.example``."""
    lines, group = [ENV_HEADER.rstrip("\n")], None
    for s in ALL_SETTINGS:
        if s.group != group:
            group = s.group
            lines += ["", f"# --- {group} ---"]
        lines += textwrap.wrap(
            s.help, WIDTH, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
        )
        lines.append(f"{s.variable}={s.example if s.example is not None else value(s, s.default)}")
    return "\n".join(lines) + "\n"


def docs_table() -> str:
    """The settings table of ``docs/architecture.md`` (between its markers)."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for s in ALL_SETTINGS:
        shown = value(s, s.default)
        default = s.shown_default or (f"`{shown}`" if shown else "unset")
        rows.append(f"| `{s.variable}` | {default} | {s.help.replace('|', '/')} |")
    return "\n".join(rows)


def with_table(document: str) -> str:
    """``document`` with the text between its settings markers replaced by :func:`docs_table`."""
    head, start, rest = document.partition(TABLE_START)
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"{ARCHITECTURE.name} has no {TABLE_START} ... {TABLE_END} markers")
    return f"{head}{TABLE_START}\n{docs_table()}\n{TABLE_END}{tail}"


def stale() -> list[str]:
    """The generated files that are out of step with the declaration."""
    out = []
    if ENV_EXAMPLE.read_text(encoding="utf-8") != env_example():
        out.append(str(ENV_EXAMPLE.relative_to(ROOT)))
    document = ARCHITECTURE.read_text(encoding="utf-8")
    if document != with_table(document):
        out.append(str(ARCHITECTURE.relative_to(ROOT)))
    return out


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.strip().partition("\n")[0]
    p = argparse.ArgumentParser(prog="python -m service.settings_doc", description=summary)
    p.add_argument("--write", action="store_true", help="rewrite .env.example and the docs table")
    p.add_argument("--check", action="store_true", help="exit 1 when either is out of step")
    args = p.parse_args(argv)
    if args.write:
        ENV_EXAMPLE.write_text(env_example(), encoding="utf-8")
        ARCHITECTURE.write_text(with_table(ARCHITECTURE.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if args.check:
        out = stale()
        for name in out:
            print(
                f"{name} is out of step with the settings' declaration: python -m service.settings_doc --write"
            )
        return 1 if out else 0
    sys.stdout.write(env_example())
    return 0


if __name__ == "__main__":
    sys.exit(main())
