"""What is said, the query: a user's text as an FTS5 expression.

**The query.** The user's text becomes an FTS5 expression that cannot be a syntax error: every word
(a run of Unicode letters and digits) and every ``"quoted phrase"`` is written as an FTS5 string,
so operators (``AND``, ``NEAR``, ``*``, ``:``, parentheses) in the text are just words. Unquoted words
are alternatives (``OR``: a cue that says some of them matches, BM25 ranks those that say more, and
rarer, words higher); common English words (:data:`STOP_WORDS`) are left out when others remain.
Quoted phrases must all be said, in order (``"harbour lights" ferry``: cues with the phrase, ranked
higher when they also say "ferry"). Adjacent pairs of the query's words are added as phrases that
only rank: a cue that says "old lighthouse" ranks above one that says "old" and "lighthouse" apart
(the sequential-dependence idea of term proximity). At most :data:`MAX_TERMS` words and phrases
are used.

**Simple plurals.** A plural word matches its singular too (``walruses`` / ``walrus``, ``lights`` /
``light``, ``ferries`` / ``ferry``), and a phrase its last word's (``"purple walruses"`` matches a cue
that says "purple walrus"): each is an FTS5 ``OR`` of its forms, one unit still (:func:`_forms`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["STOP_WORDS", "SpokenQuery", "split_clues", "spoken_query"]

MAX_TERMS = 32  # words and phrases of a query used for the spoken ranking
STOP_WORDS = frozenset(
    "a an the and or but of to in on at by for with from into onto is are was were be been being am it "
    "its this that these those there here then than as so not no do does did has have had i you he she "
    "we they me him her us them my your his our their what which who whom when where while how some any "
    "all just very also about after before over under up out if because can will would could should".split()
)
_PHRASE = re.compile(r'"([^"]*)"')
_WORD = re.compile(r"[^\W_]+")  # letters and digits (FTS5's unicode61 token characters)


def _string(text: str) -> str:
    """An FTS5 string: double quotes doubled, the whole in double quotes."""
    return '"' + text.replace('"', '""') + '"'


def _forms(word: str) -> list[str]:
    """``word`` and, when it reads as a regular English plural, its singular (``walruses`` -> ``walrus``,
    ``lights`` -> ``light``, ``ferries`` -> ``ferry``); a word in ``-us`` also in ``-uses``. The index's
    Porter stemmer joins most other pairs; these are the ones it stems apart (``walrus``/``walruses``)
    or that a phrase needs spelled out."""
    forms = [word]
    if len(word) > 4 and word.endswith("ies"):
        forms.append(word[:-3] + "y")
    elif len(word) > 3 and word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        forms.append(word[:-2])
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        forms.append(word[:-1])
    if len(word) > 3 and word.endswith("us"):
        forms.append(word + "es")
    return forms


def _unit(text: str) -> str:
    """A word or phrase as one FTS5 expression: its last word in each simple number (``_forms``)."""
    *head, last = text.split(" ")
    forms = [" ".join((*head, f)) for f in _forms(last)]
    if len(forms) == 1:
        return _string(forms[0])
    return "(" + " OR ".join(_string(f) for f in forms) + ")"


@dataclass(frozen=True)
class SpokenQuery:
    expression: str  # the FTS5 MATCH expression
    units: tuple[str, ...]  # each word or phrase as its own expression (coverage counts them)


def spoken_query(text: str | None) -> SpokenQuery | None:
    """The FTS5 query of a user's text (module docstring); None when it holds no word."""
    if not text:
        return None
    phrases = []
    for inner in _PHRASE.findall(text):
        words = _WORD.findall(inner.lower())
        if words and " ".join(words) not in phrases:
            phrases.append(" ".join(words))
    sequence = _WORD.findall(_PHRASE.sub(" ", text).lower())
    words = list(dict.fromkeys(sequence))
    informative = [w for w in words if w not in STOP_WORDS]
    if informative or phrases:
        words = informative
    phrases, words = phrases[:MAX_TERMS], words[: max(0, MAX_TERMS - len(phrases))]
    if not phrases and not words:
        return None
    units = tuple(_unit(u) for u in (*phrases, *words))
    # adjacent pairs of the query's words, as phrases: they only rank (a cue that says "old
    # lighthouse" above one that says "old" and "lighthouse" apart), they never make a match alone
    kept = set(words)
    pairs = list(
        dict.fromkeys(
            f"{a} {b}"
            for a, b in zip(sequence, sequence[1:], strict=False)
            if a in kept and b in kept and a != b
        )
    )
    ranking = " OR ".join((*units, *(_string(p) for p in pairs[:MAX_TERMS])))
    required = " AND ".join(_unit(p) for p in phrases)
    if not phrases:
        expression = ranking
    elif not words:
        expression = required
    else:  # the phrases are required; the words rank among the cues that say them
        expression = f"{required} AND ({ranking})"
    return SpokenQuery(expression, units)


def split_clues(text: str | None) -> tuple[str | None, str | None]:
    """(what is seen, what is said) of a ``both`` query: the words outside its quoted phrases and
    the phrases; the whole text for both when it has no phrase or nothing outside them."""
    if not text:
        return text, text
    phrases = [p for p in _PHRASE.findall(text) if _WORD.search(p)]
    rest = " ".join(_PHRASE.sub(" ", text).replace('"', " ").split())
    if not phrases or not _WORD.search(rest):
        return text, text
    return rest, " ".join(_string(p) for p in phrases)
