"""Opaque page tokens over the stage-1 ranking.

A page is a window of ``shortlist`` consecutive stage-1 candidates; stage 2 reranks the window and
the answer holds its best ``top_k``. The token of the next page, ``p<offset>.<digest>``, records
where the next window starts and a digest of everything that shaped the ranking (query text and
image, filter, mode, shortlist, top_k and the index). Its form is in the OpenAPI document
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
PAGE_TOKEN_PATTERN = r"^p[0-9]{1,4}\.[0-9a-f]{16}$"
_TOKEN = re.compile(PAGE_TOKEN_PATTERN)


class InvalidPageToken(ValueError):
    """A page token that is not of this server's form (HTTP 422)."""


class StalePageToken(ValueError):
    """A page token of another request or index (HTTP 409)."""


def ranking_digest(**parts) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_page_token(offset: int, digest: str) -> str:
    return f"p{int(offset)}.{digest}"


def decode_page_token(token: str, digest: str) -> int:
    """The stage-1 offset a token starts its page at."""
    if not _TOKEN.match(token):
        raise InvalidPageToken("not a page token this server issued")
    offset, token_digest = token[1:].split(".")
    if token_digest != digest:
        raise StalePageToken(
            "the token belongs to another query, filter or index; send the same request as the page it came from"
        )
    return int(offset)
