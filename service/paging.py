"""Opaque page tokens over one ranking.

The ranking is stage 2's order of the first window of ``shortlist`` (R) stage-1 candidates, then of
the next window, and so on (engine.search.searcher); R never depends on ``top_k``, and a page holds
the next ``top_k`` results of that ranking, starting where the last page ended. The token of the
next page, ``p<offset>_<skip>_<start>.<digest>``, records the window it starts in, how many of that
window's results earlier pages showed, the rank of its first result, and a digest of everything
that shaped the ranking (query text and image, filter, mode, shortlist, min_score, grouping and the
index; not ``top_k``: a client may change the page size between pages). Its form is in the OpenAPI document
(``PAGE_TOKEN_PATTERN``: anything else is a 422); a well-formed token that belongs to another
request, or to the index before a swap, is a 409, rather than a silent walk through a different
ranking. Tokens are not secrets: forging one only moves the window, which asking for more pages does
anyway.
"""

from __future__ import annotations

import hashlib
import json
import re

MAX_OFFSET = 9_999  # stage-1 ranks a client may page to (four digits in the token)
PAGE_TOKEN_PATTERN = r"^p[0-9]{1,4}_[0-9]{1,4}_[0-9]{1,5}\.[0-9a-f]{16}$"
_TOKEN = re.compile(PAGE_TOKEN_PATTERN)


class InvalidPageToken(ValueError):
    """A page token that is not of this server's form (HTTP 422)."""


class StalePageToken(ValueError):
    """A page token of another request or index (HTTP 409)."""


def ranking_digest(**parts) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_page_token(offset: int, skip: int, start: int, digest: str) -> str:
    return f"p{int(offset)}_{int(skip)}_{int(start)}.{digest}"


def decode_page_token(token: str, digest: str) -> tuple[int, int, int]:
    """Where a token's page starts: (window offset, results of it already shown, rank of its first)."""
    if not _TOKEN.match(token):
        raise InvalidPageToken("not a page token this server issued")
    place, token_digest = token[1:].split(".")
    if token_digest != digest:
        raise StalePageToken(
            "the token belongs to another query, filter or index; send the same request as the page it came from"
        )
    offset, skip, start = (int(n) for n in place.split("_"))
    return offset, skip, max(start, 1)
